"""``python -m enzyme_py info``: what this installation can do."""

from __future__ import annotations

import argparse
import json
import sys

from enzyme_py import info


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m enzyme_py")
    parser.add_argument("command", choices=["info"], help="info: print ez.info()")
    parser.add_argument("--json", action="store_true", help="print JSON")
    args = parser.parse_args(argv)
    details = info()
    if args.json:
        print(json.dumps(details, indent=2))
        return 0
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
    return 0


if __name__ == "__main__":
    sys.exit(main())
