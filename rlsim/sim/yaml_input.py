"""Reading YAML nobody vetted: one bounded read, `safe_load` semantics, limits that keep it quick.

A scenario (or a hardware profile it names) may be any file: a FIFO that never ends, /dev/zero, a
50 MB log, an alias bomb that expands to billions of nodes, a mapping nested 100,000 deep, an
integer with 10,000 digits. Each is refused here with one line, before anything is built from it.
Plain safe_load would block, run out of memory, hit the recursion limit or trace back instead.
The limits are far above any real scenario (the shipped ones are < 10 kB, < 10 aliases, depth < 10).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import yaml

from rlsim.sim.limits import MAX_SCENARIO_BYTES as MAX_FILE_BYTES

MAX_ALIASES = 100  # `*name` uses in one document
MAX_NODES = 100_000  # scalars + collections after expanding every alias
MAX_DEPTH = 64  # nesting of mappings and sequences
MAX_INT_DIGITS = 19  # |int| < 2**63: what numpy and every counter of the simulator can hold
_INT_TAG = "tag:yaml.org,2002:int"
_CONSTRUCTOR = yaml.constructor.SafeConstructor()


class YamlInputError(ValueError):
    """A file or text refused before or while parsing; `message` is one line without the file name."""

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


def read_text_bounded(path: str | Path, limit: int = MAX_FILE_BYTES, what: str = "a YAML file") -> str:
    """The UTF-8 text of a regular file of at most `limit` bytes, read once.

    Opened non-blocking so that a FIFO does not wait for a writer; anything but a regular file is
    refused from its fstat, before a byte is read. FileNotFoundError propagates (callers word it).
    """
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except IsADirectoryError:
        raise YamlInputError(f"is a directory, expected {what}") from None
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise YamlInputError(f"cannot read file: {exc.strerror or exc}") from None
    try:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            raise YamlInputError(f"is a directory, expected {what}")
        if not stat.S_ISREG(info.st_mode):
            raise YamlInputError(f"not a regular file (a FIFO, device or socket), expected {what}")
        if info.st_size > limit:
            raise YamlInputError(f"file is {info.st_size:,} bytes, more than the limit of {limit:,}")
        chunks, size = [], 0
        while size <= limit:
            chunk = os.read(fd, limit + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except OSError as exc:
        raise YamlInputError(f"cannot read file: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
    if size > limit:  # grew while being read
        raise YamlInputError(f"file is more than the limit of {limit:,} bytes")
    try:
        return b"".join(chunks).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise YamlInputError(f"not UTF-8 text (byte {exc.start})") from None


class _BoundedLoader(yaml.SafeLoader):
    """SafeLoader whose composer counts aliases, bounds nesting and refuses self-referencing aliases."""

    def __init__(self, stream: str):
        super().__init__(stream)
        self._aliases = 0
        self._open_anchors: list[str | None] = []

    def compose_node(self, parent, index):  # noqa: ANN001 - PyYAML's signature
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent):
            self._aliases += 1
            if self._aliases > MAX_ALIASES:
                raise YamlInputError(f"more than {MAX_ALIASES} aliases (*name): refused as a possible alias bomb")
            if event.anchor in self._open_anchors:
                raise YamlInputError(
                    f"alias *{event.anchor} at line {event.start_mark.line + 1} refers to a node that contains it"
                )
            return super().compose_node(parent, index)
        if len(self._open_anchors) >= MAX_DEPTH:
            raise YamlInputError(f"nested more than {MAX_DEPTH} levels deep (line {event.start_mark.line + 1})")
        self._open_anchors.append(getattr(event, "anchor", None))
        try:
            return super().compose_node(parent, index)
        finally:
            self._open_anchors.pop()


def parse_yaml(text: str) -> tuple[Any, yaml.Node | None]:
    """(data, composed node) of a single YAML document, as `yaml.safe_load` would build it.

    Raises YamlInputError with one line for syntax errors and for every limit of this module.
    """
    try:
        loader = _BoundedLoader(text)
    except yaml.reader.ReaderError as exc:  # a NUL or other control character, found before parsing starts
        line = text.count("\n", 0, max(0, exc.position)) + 1
        raise YamlInputError(f"invalid YAML at line {line}: character #x{exc.character:04x} is not allowed in "
                             "YAML text (a binary file, or a control character pasted in?)") from None
    try:
        node = loader.get_single_node()
        if node is not None:
            _check_expansion(node)
        data = loader.construct_document(node) if node is not None else None
    except yaml.YAMLError as exc:
        raise YamlInputError(yaml_error_message(exc)) from None
    except RecursionError:  # a limit above should have caught it first; never a traceback
        raise YamlInputError(f"nested more than {MAX_DEPTH} levels deep") from None
    finally:
        loader.dispose()
    return data, node


def _check_expansion(root: yaml.Node) -> None:
    """Nodes after alias expansion (an alias bomb is small as text, huge as data) and integer sizes."""
    sizes: dict[int, int] = {}

    def size(node: yaml.Node) -> int:
        known = sizes.get(id(node))
        if known is not None:
            return known
        total = 1
        if isinstance(node, yaml.MappingNode):
            total += sum(size(k) + size(v) for k, v in node.value)
        elif isinstance(node, yaml.SequenceNode):
            total += sum(size(item) for item in node.value)
        elif node.tag == _INT_TAG:
            _check_int(node)
        if total > MAX_NODES:
            raise YamlInputError(f"expands to more than {MAX_NODES:,} values (aliases included)")
        sizes[id(node)] = total
        return total

    size(root)


def _check_int(node: yaml.ScalarNode) -> None:
    digits = node.value.lstrip("+-").replace("_", "")
    where = f"line {node.start_mark.line + 1}"
    if len(digits) > MAX_INT_DIGITS + 2:  # 0x / 0b prefixes; the exact check follows
        raise YamlInputError(f"integer at {where} is too large ({len(digits)} digits, at most {MAX_INT_DIGITS})")
    value = _CONSTRUCTOR.construct_yaml_int(node)
    if abs(value) >= 2**63:
        raise YamlInputError(f"integer at {where} is too large (|value| must be < 2^63)")


def yaml_error_message(exc: yaml.YAMLError) -> str:
    """`invalid YAML at line L, column C: what` from a PyYAML error."""
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    what = getattr(exc, "problem", None) or str(exc)
    context = getattr(exc, "context", None)
    if context:
        what = f"{what} ({context})"
    if mark is None:
        return f"invalid YAML: {' '.join(str(what).split())}"
    return f"invalid YAML at line {mark.line + 1}, column {mark.column + 1}: {what}"


def load_yaml_file(path: str | Path) -> Any:
    """`yaml.safe_load` of a file with this module's limits (hardware profiles and other small inputs)."""
    return parse_yaml(read_text_bounded(path))[0]
