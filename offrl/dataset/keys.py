"""The one rule for the key names of dict observations.

Every reader and writer that takes dict-observation keys (``MDPDataset``
and episodes given dicts, gymnasium ``Dict`` spaces, offrl's HDF5 files,
disk datasets, Minari datasets, :class:`~offrl.dataset.Signature`) checks
them here, so a key accepted in one place is accepted everywhere.

A key is a name, the way a user's dict keys and gymnasium's ``Dict`` keys
are (``"image"``, ``"joint pos"``, ``"achieved_goal"``, ``"état"``):

- a ``str`` of 1 to :data:`MAX_KEY_LENGTH` characters, every one printable
  (no NUL, newline, tab or other control character) and no backslash;
- ``/`` only between the parts of a nested key (Minari stores a nested
  ``Dict`` member as ``"outer/inner"``): no part is empty, and no part
  starts with ``.`` (so no ``"."``, ``".."`` or hidden names), so a key
  can never name a place outside the dict it belongs to when a writer uses
  it as a group or file name.

Anything else raises ``ValueError`` (``TypeError`` for a key that is not a
string) naming the key and where it came from.
"""

from __future__ import annotations

from typing import Any, Iterable

__all__ = ["MAX_KEY_LENGTH", "check_observation_key", "check_observation_keys"]

#: the longest key name accepted, in characters
MAX_KEY_LENGTH = 256

#: keys already found valid (dicts are checked at every step they are
#: given, with the same few keys): a bounded set, cleared when full
_ACCEPTED: set = set()


def check_observation_key(key: Any, where: str = "observations") -> str:
    """``key`` after checking it is a valid dict-observation key name (see
    the module docstring); ``where`` names its source in the error."""
    if key in _ACCEPTED and type(key) is str:
        return key
    if not isinstance(key, str):
        raise TypeError(f"{where} has key {key!r} ({type(key).__name__}): dict observation keys must be strings")
    shown = repr(key) if len(key) <= 80 else repr(key[:80]) + "..."
    if not key:
        raise ValueError(f"{where} has an empty key: dict observation keys must be non-empty names")
    if len(key) > MAX_KEY_LENGTH:
        raise ValueError(f"{where} has key {shown} of {len(key)} characters; at most {MAX_KEY_LENGTH} are accepted")
    for i, ch in enumerate(key):
        if not ch.isprintable() or ch == "\\":
            what = "a backslash" if ch == "\\" else f"the control character {ch!r}"
            raise ValueError(f"{where} has key {shown} with {what} at position {i}: dict observation keys are "
                             "printable names")
    for part in key.split("/"):
        if not part:
            raise ValueError(f"{where} has key {shown} with an empty part: '/' only separates the names of a "
                             "nested key ('outer/inner')")
        if part.startswith("."):
            raise ValueError(f"{where} has key {shown} with a part starting with '.' ({part!r}): dict observation "
                             "keys are names, not paths")
    if len(_ACCEPTED) >= 4096:
        _ACCEPTED.clear()
    _ACCEPTED.add(str(key))
    return key


def check_observation_keys(keys: Iterable[Any], where: str = "observations") -> tuple[str, ...]:
    """``keys`` as a tuple after checking each with
    :func:`check_observation_key` and that none repeats."""
    out = tuple(check_observation_key(k, where) for k in keys)
    if len(set(out)) != len(out):
        seen: set = set()
        repeated = next(k for k in out if k in seen or seen.add(k))  # type: ignore[func-returns-value]
        raise ValueError(f"{where} repeats the key {repeated!r}")
    return out
