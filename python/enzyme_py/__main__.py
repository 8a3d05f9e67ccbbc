"""``python -m enzyme_py``: what this installation can do, and its disk cache.

python -m enzyme_py info [--json]          ez.info()
python -m enzyme_py cache info [--json]    the disk cache: folder, entries, bytes
python -m enzyme_py cache clear            remove its entries, say what was removed
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from enzyme_py import _cache, info


def _size(n: int) -> str:
    if n < 1024:
        return f"{n} bytes"
    value = n / 1024
    for unit in ("KiB", "MiB"):
        if value < 1024:
            return f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} GiB"


def _print_info(details: dict[str, Any]) -> None:
    for key, value in details.items():
        if key == "offload_devices" and isinstance(value, list):
            print(f"{key}:")
            for d in value:
                gib = d["memory"] / 2**30
                print(
                    f"  - {d['name']} (platform {d['platform']}, type {d['type']}, {gib:.1f} GiB)"
                )
            continue
        print(f"{key}: {value}")


def _cache_command(action: str, as_json: bool) -> int:
    if action == "info":
        details = _cache.summary()
        if as_json:
            print(json.dumps(details, indent=2))
            return 0
        state = "" if details["enabled"] else " (not used: ENZYME_PY_DISK_CACHE=0)"
        print(f"directory: {details['directory']}{state}")
        print(f"entries: {details['entries']}")
        print(f"size: {_size(details['bytes'])} ({details['bytes']} bytes)")
        return 0
    folder = _cache.configured_dir()
    removed, size = _cache.clear()
    if as_json:
        print(json.dumps({"directory": str(folder), "removed": removed, "bytes": size}))
    else:
        files = "file" if removed == 1 else "files"
        print(f"removed {removed} {files} ({_size(size)}) from {folder}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m enzyme_py")
    commands = parser.add_subparsers(dest="command", required=True, metavar="{info,cache}")
    show = commands.add_parser("info", help="print ez.info()")
    show.add_argument("--json", action="store_true", help="print JSON")
    cache = commands.add_parser("cache", help="the disk cache of compiled derivatives")
    cache.add_argument(
        "action", choices=["info", "clear"], help="info: folder, entries, size; clear: remove"
    )
    cache.add_argument("--json", action="store_true", help="print JSON")
    args = parser.parse_args(argv)
    if args.command == "cache":
        return _cache_command(args.action, args.json)
    details = info()
    if args.json:
        print(json.dumps(details, indent=2))
    else:
        _print_info(details)
    return 0


if __name__ == "__main__":
    sys.exit(main())
