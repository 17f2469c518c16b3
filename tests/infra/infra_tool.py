"""Runs under .venv-infra's python (not pytest's): parses what the tests check and prints JSON.

    python infra_tool.py hcl HCL2_LIB_DIR FILE.tf...   -> {"FILE.tf": parsed | {"__error__": msg}}
    python infra_tool.py yaml FILE.yaml...             -> {"FILE.yaml": parsed}

`hcl` uses python-hcl2 from HCL2_LIB_DIR (installed there with pip --target, see
requirements-infra.txt): strings without their quotes, no comments, and "__is_block__": true on
every block, so `x { ... }` (a block) and `x = { ... }` (an attribute) stay distinguishable.
"""

import json
import sys


def parse_hcl(lib_dir: str, files: list[str]) -> dict:
    sys.path.insert(0, lib_dir)
    import hcl2
    from hcl2.utils import SerializationOptions

    options = SerializationOptions(strip_string_quotes=True, with_comments=False, explicit_blocks=True)
    result = {}
    for name in files:
        try:
            with open(name, encoding="utf-8") as handle:
                result[name] = hcl2.load(handle, serialization_options=options)
        except Exception as exc:  # noqa: BLE001 - reported per file by the test
            result[name] = {"__error__": f"{type(exc).__name__}: {exc}"}
    return result


def parse_yaml(files: list[str]) -> dict:
    import yaml

    result = {}
    for name in files:
        with open(name, encoding="utf-8") as handle:
            result[name] = yaml.safe_load(handle)
    return result


def main() -> None:
    command, args = sys.argv[1], sys.argv[2:]
    if command == "hcl":
        data = parse_hcl(args[0], args[1:])
    elif command == "yaml":
        data = parse_yaml(args)
    else:
        raise SystemExit(f"unknown command {command!r}")
    json.dump(data, sys.stdout)


if __name__ == "__main__":
    main()
