"""A first workflow: greet someone on an agent, then shout the greeting on the manager."""

from workflows_app.sdk import RecoverableError, operation, workflow


@operation(max_retries=3, retry_interval=1)
def greet(ctx, name):
    """Runs on an agent. Its first attempt fails on purpose, to show a retry."""
    ctx.log(f"attempt {ctx.attempt} to greet {name}")
    if ctx.attempt == 1:
        raise RecoverableError("not ready yet, try again")
    return f"Hello, {name}!"


@operation
def shout(ctx, text):
    """Runs on the manager: this step names no agent."""
    return text.upper()


@workflow
def hello(ctx, name="world", agent="host-1"):
    greeting = ctx.await_execute("greet", greet, name, agent=agent)
    loud = ctx.await_execute("shout", shout, greeting)
    ctx.set_payload({"greeting": greeting, "loud": loud})
