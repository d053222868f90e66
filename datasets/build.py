"""Build offrl's built-in datasets by their recipes and write one card each.

    python datasets/build.py                 # every dataset
    python datasets/build.py cartpole-replay # some of them

Each dataset is built into a temporary directory with
``offrl.datasets.build_dataset`` (the same function ``get_dataset`` uses),
then its card ``datasets/<name>.md`` is written with the recipe, the
statistics and the SHA-256 of the file, and the checksums are collected in
``offrl/datasets/_reference.py`` (the reference a user's rebuild is
compared with). The recipes themselves live in
``offrl/datasets/builtin.py`` so that an installed offrl can build them.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REFERENCE = os.path.join(HERE, "..", "offrl", "datasets", "_reference.py")


def _stats(values) -> dict:
    import numpy as np

    values = np.asarray(values, dtype=np.float64)
    return {"mean": round(float(values.mean()), 4), "std": round(float(values.std()), 4),
            "min": round(float(values.min()), 4), "max": round(float(values.max()), 4)}


def card(name: str, path: str, checksum: str, seconds: float) -> tuple:
    import offrl
    from offrl.dataset import MDPDataset
    from offrl.datasets.builtin import RECIPES

    from offrl.datasets.builtin import SHIPPED

    recipe = RECIPES[name]
    dataset = MDPDataset.load(path)
    build_time = "not timed" if seconds != seconds else f"{seconds:.1f} s on the 2-core development machine"
    if name in SHIPPED:
        build_time += "; longer than a minute, so the file is shipped in `offrl/datasets/prebuilt/`"
    summary = dataset.summary()
    facts = {
        "name": name,
        "environment": recipe.env_id,
        "behaviour_policy": recipe.behaviour,
        "seed": recipe.seed,
        "steps": int(dataset.transition_count),
        "episodes": int(summary["episodes"]),
        "terminated_episodes": int(summary["terminated_episodes"]),
        "episode_return": _stats(dataset.compute_returns()),
        "episode_length": _stats([len(e) for e in dataset.episodes]),
        "sha256": checksum,
        "file_bytes": os.path.getsize(path),
        "offrl_version": offrl.__version__,
    }
    text = f"""# {name}

{recipe.behaviour} in `{recipe.env_id}` (gymnasium), {facts['steps']:,} steps, seed {recipe.seed}.

| | |
|---|---|
| behaviour policy | {recipe.behaviour} |
| environment | `{recipe.env_id}` |
| steps (transitions) | {facts['steps']:,} |
| episodes | {facts['episodes']:,} ({facts['terminated_episodes']:,} terminated, the others truncated) |
| episode return | mean {facts['episode_return']['mean']:.2f}, std {facts['episode_return']['std']:.2f}, min {facts['episode_return']['min']:.2f}, max {facts['episode_return']['max']:.2f} |
| episode length | mean {facts['episode_length']['mean']:.1f}, min {facts['episode_length']['min']:.0f}, max {facts['episode_length']['max']:.0f} |
| seed | {recipe.seed} |
| file | {facts['file_bytes']:,} bytes, SHA-256 `{checksum}` |
| build time | {build_time} |

## Use

```python
import offrl
dataset, env = offrl.datasets.get_dataset("{name}")
```

The first call {'copies the shipped file (checked against the reference checksum)' if name in SHIPPED else 'builds the file by its recipe'}
(`offrl/datasets/builtin.py`, recipe `{name}`) into the cache directory (`$OFFRL_DATA_DIR`, else
`~/.cache/offrl/datasets`) and checks it by checksum afterwards.

## Rebuild

`offrl.datasets.get_dataset("{name}", rebuild=True)`, or
`python datasets/build.py {name}` to rebuild and rewrite this card. The
same machine gives the identical file; recipes that train a network can
differ in the last bits on another CPU or torch build (a warning says so).

## Facts (machine-readable)

```json
{json.dumps(facts, indent=2)}
```
"""
    with open(os.path.join(HERE, f"{name}.md"), "w") as f:
        f.write(text)
    return facts


def write_reference(checksums: dict) -> None:
    lines = [
        '"""SHA-256 of each built-in dataset built on the reference machine',
        '(written by ``datasets/build.py``; see the cards in ``datasets/``)."""',
        "",
        "# name: (steps, SHA-256)",
        "REFERENCE_SHA256 = {",
    ]
    lines += [f"    {name!r}: ({steps}, {checksum!r})," for name, (steps, checksum) in sorted(checksums.items())]
    lines.append("}")
    with open(REFERENCE, "w") as f:
        f.write("\n".join(lines) + "\n")


def main(argv=None) -> int:
    sys.path.insert(0, os.path.join(HERE, ".."))
    from offrl.datasets.builtin import PREBUILT_DIRECTORY, RECIPES, SHIPPED, build_dataset

    try:
        from offrl.datasets._reference import REFERENCE_SHA256
    except ImportError:
        REFERENCE_SHA256 = {}
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help=f"datasets (default: all of {', '.join(sorted(RECIPES))})")
    parser.add_argument("--from-dir", default=None,
                        help="use <name>.h5 files already built by build_dataset in this directory instead of building")
    args = parser.parse_args(argv)
    names = args.names or sorted(RECIPES)
    checksums = dict(REFERENCE_SHA256)
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            start = time.perf_counter()
            given = os.path.join(args.from_dir, f"{name}.h5") if args.from_dir else None
            if given and os.path.isfile(given):
                path, seconds = given, float("nan")
                with open(given, "rb") as f:
                    checksum = hashlib.sha256(f.read()).hexdigest()
            else:
                path = os.path.join(tmp, f"{name}.h5")
                checksum = build_dataset(name, path)
                seconds = time.perf_counter() - start
            if name in SHIPPED:
                os.makedirs(PREBUILT_DIRECTORY, exist_ok=True)
                shutil.copyfile(path, os.path.join(PREBUILT_DIRECTORY, f"{name}.h5"))
            facts = card(name, path, checksum, seconds)
            checksums[name] = (facts["steps"], checksum)
            print(f"{name:18s} {seconds:6.1f} s  {facts['episodes']:5d} episodes  "
                  f"return {facts['episode_return']['mean']:9.2f}  sha256 {checksum[:16]}")
    write_reference(checksums)
    return 0


if __name__ == "__main__":
    sys.exit(main())
