#!/usr/bin/env python
"""Django's command-line utility for the shop, Switchyard's commands included
(``migrate``, ``run_manager``, ``run_agent``, ``run_flower``, ``start_execution``, ...)."""

import os
import sys


def main():
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "shop.settings")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
