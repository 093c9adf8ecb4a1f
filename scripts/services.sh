#!/usr/bin/env bash
# CI's services: checks that the machine's PostgreSQL (5432), Redis (6379) and RabbitMQ (5672)
# accept connections on 127.0.0.1, and starts the ones that do not with the machine's own
# Debian packages. One line per service; the exit status is 1 when one is still down after 30 s.
#   scripts/services.sh [postgres] [redis] [rabbitmq]      (no argument: all three)
set -u

listening() {  # port -> 0 when something accepts a TCP connection there
  timeout 3 bash -c "exec 3<>/dev/tcp/127.0.0.1/$1" 2>/dev/null
}

start_postgres() {
  local version
  version=$(ls /etc/postgresql 2>/dev/null | sort -V | tail -n 1)
  [ -n "$version" ] && pg_ctlcluster --skip-systemctl-redirect "$version" main start
}

start_redis() {  # no persistence: CI's Redis keeps nothing across restarts
  mkdir -p /var/lib/redis /var/log/redis
  redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save "" --appendonly no \
    --dir /var/lib/redis --logfile /var/log/redis/switchyard-ci.log
}

start_rabbitmq() {
  rabbitmq-server -detached
}

status=0
services=("$@")
[ ${#services[@]} -gt 0 ] || services=(postgres redis rabbitmq)
for service in "${services[@]}"; do
  case $service in
    postgres) port=5432 ;;
    redis) port=6379 ;;
    rabbitmq) port=5672 ;;
    *) echo "services: no such service: $service" >&2; status=1; continue ;;
  esac
  if ! listening $port; then
    echo "services: $service is not answering on 127.0.0.1:$port, starting it"
    "start_$service" >/dev/null 2>&1
  fi
  for _ in $(seq 30); do listening $port && break; sleep 1; done
  if listening $port; then
    echo "services: $service answers on 127.0.0.1:$port"
  else
    echo "services: $service still does not answer on 127.0.0.1:$port" >&2; status=1
  fi
done
exit $status
