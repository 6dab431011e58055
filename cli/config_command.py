"""`kafka-policy-proxy config show|schema`: the effective proxy config and its JSON Schema."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, SecretStr

from kafka_policy_proxy.proxy.config import (
    ENV_PREFIX,
    FILE_SUFFIX,
    ConfigError,
    HostPort,
    ProxyConfig,
    build_config,
    read_config_file,
)

MASK = "********"


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register the `config` command and its subcommands on the main CLI."""
    config = subparsers.add_parser("config", help="show the effective proxy config, or its schema")
    commands = config.add_subparsers(dest="config_command", required=True, metavar="COMMAND")
    show = commands.add_parser(
        "show",
        help="print the effective config with each value's source (exit 2: bad config)",
        description="Print the config `run` would use (the file, KPP_* environment overrides and "
        "defaults) as YAML, secrets masked. Each value ends in a comment naming its source: "
        "'file', 'env KPP_...', 'default', or '<name>_file' for a secret read from that file. "
        "Exit code 2: bad config, with the key path and the reason.",
    )
    show.add_argument("--config", type=Path, help="YAML config file (as for run)")
    show.set_defaults(func=cmd_show)
    schema = commands.add_parser(
        "schema", help="print the config file's JSON Schema (for editor validation)"
    )
    schema.set_defaults(func=cmd_schema)


def cmd_show(args: argparse.Namespace) -> int:
    """Print the effective config with sources: 0 shown, 2 bad config."""
    try:
        data = read_config_file(args.config)
        config = build_config(data, args.config)
    except ConfigError as exc:
        print(f"kafka-policy-proxy: {exc}", file=sys.stderr)
        return 2
    print(render_config(config, data, os.environ), end="")
    return 0


def cmd_schema(args: argparse.Namespace) -> int:
    """Print the proxy config's JSON Schema."""
    print(json.dumps(ProxyConfig.model_json_schema(), indent=2))
    return 0


def render_config(config: ProxyConfig, data: Mapping[str, Any], env: Mapping[str, str]) -> str:
    """The config as YAML, secrets masked, each value followed by `# <source>`."""
    lines: list[str] = []
    _render(config, (), data, env, lines)
    return "".join(line + "\n" for line in lines)


def _render(
    section: BaseModel,
    path: tuple[str, ...],
    data: Mapping[str, Any],
    env: Mapping[str, str],
    lines: list[str],
) -> None:
    indent = "  " * len(path)
    for name in type(section).model_fields:
        value = getattr(section, name)
        key = (*path, name)
        if isinstance(value, BaseModel):
            lines.append(f"{indent}{name}:")
            _render(value, key, data, env, lines)
            continue
        # One flow-style item ("[value]\n"), so that a list stays on the key's line too.
        text = yaml.safe_dump([_plain(value)], default_flow_style=True, width=10**6)[1:-2]
        lines.append(f"{indent}{name}: {text}  # {_source(section, key, data, env)}")


def _plain(value: Any) -> Any:
    """A leaf value in the form the config file takes it."""
    if isinstance(value, SecretStr):
        return MASK
    if isinstance(value, list):
        return [_plain(item) for item in value]
    if isinstance(value, HostPort | Path):
        return str(value)
    return value


def _source(
    section: BaseModel, key: tuple[str, ...], data: Mapping[str, Any], env: Mapping[str, str]
) -> str:
    # The environment wins over the file, and may set a whole section (as JSON) or one key.
    for end in range(len(key), 0, -1):
        name = ENV_PREFIX + "__".join(part.upper() for part in key[:end])
        if name in env:
            return f"env {name}"
    node: Any = data
    for part in key:
        if not isinstance(node, Mapping) or part not in node:
            break
        node = node[part]
    else:
        return "file"
    file_key = key[-1] + FILE_SUFFIX
    if getattr(section, file_key, None) is not None:
        return file_key
    return "default"
