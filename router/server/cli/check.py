"""`smp-router config check`: the configuration in effect, as the file would say it.
"""

from __future__ import annotations

import argparse

from ..router import listener_tls
from ..settings.config_file import (
    render_config,
)
from .settings import (
    SECRET_SETTINGS,
    check_store_key_of,
    config_file_path,
    config_from_settings,
    effective_settings,
)


def config_check(args: argparse.Namespace) -> None:
    """Print the configuration in effect (passwords hidden); errors go through main's report."""
    path = config_file_path(args)
    settings = effective_settings(args)
    config = config_from_settings(settings)
    check_store_key_of(args, config)
    listener_tls(config)  # what serve does with the files, so that check finds the same errors
    settings.update(store=config.store, data_dir=config.data_dir, stats_log=config.stats_log)
    print(f"# configuration file: {path if path is not None else '(none: defaults)'}")
    print(render_config(settings, secret=SECRET_SETTINGS), end="", flush=True)
