"""The ``offrl`` command. Subcommands so far: ``export``."""

from __future__ import annotations

import argparse
import sys
from typing import List, Optional

__all__ = ["main"]


def _export(args: argparse.Namespace) -> int:
    from .serialization import load_learnable

    algo = load_learnable(args.model)
    algo.save_policy(args.output)
    print(f"wrote {args.output} ({type(algo).__name__}, verified against the model)")
    return 0


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="offrl", description="offline-first reinforcement learning")
    commands = parser.add_subparsers(dest="command", required=True)
    export = commands.add_parser("export", help="export a saved model's policy to ONNX or TorchScript",
                                 description="Export the greedy policy of MODEL (a file written by algo.save) "
                                             "with its scalers to OUT: .onnx for ONNX, .pt for TorchScript.")
    export.add_argument("model", help="model file written by algo.save (e.g. model_10000.d3)")
    export.add_argument("output", help="destination, .onnx or .pt")
    export.set_defaults(run=_export)
    args = parser.parse_args(argv)
    try:
        return args.run(args)
    except (ValueError, FileNotFoundError) as e:
        print(f"offrl {args.command}: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
