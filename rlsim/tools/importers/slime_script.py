"""Reading a slime launch script as text: its flag arrays, its variables, the scripts it sources, its command.

slime is configured by command-line flags, which its example scripts collect in bash arrays
(`ROLLOUT_ARGS=( --rollout-batch-size 32 ... )`) and pass to `python3 train.py ${ROLLOUT_ARGS[@]} ...`; the
model's flags come from a script it `source`s (`source "${SCRIPT_DIR}/models/qwen3-4B.sh"`). Nothing here
runs the script or any part of it: lines are split with shlex, `${VAR}` / `${VAR:-default}` / `$VAR` are
expanded from the script's own plain assignments, `${ARR[@]}` from its arrays, `SCRIPT_DIR` set from
`BASH_SOURCE` is the script's folder. Whatever needs the shell to run (command substitutions `$(...)`,
`printf -v`, loops, variables from the environment) stays unresolved and is reported as such.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from rlsim.sim.inputs import YamlInputError, read_text_bounded
from rlsim.tools.importers.common import ImportProblem

ENTRY_POINTS = ("train.py", "train_async.py")
MAX_SOURCES = 16
_ARRAY = re.compile(r"^(?:export\s+|declare\s+-a\s+|local\s+)?([A-Za-z_]\w*)=\(")
_ASSIGN = re.compile(r"^(?:export\s+|local\s+)?([A-Za-z_]\w*)=(.*)$")
_SOURCE = re.compile(r"^(?:source|\.)\s+(.+)$")
_BLOCK_OPEN = re.compile(r"^(if|for|while|until|case)\b")
_BLOCK_CLOSE = re.compile(r"^(fi|done|esac)\b")
UNRESOLVED = "\0unresolved"  # a variable the shell would compute (a command substitution, the environment)


@dataclass
class Script:
    """What a launch script says, read as text."""

    path: Path
    variables: dict[str, str] = field(default_factory=dict)
    arrays: dict[str, list[str]] = field(default_factory=dict)
    sourced: list[Path] = field(default_factory=list)
    entry: str | None = None  # train.py / train_async.py
    args: list[str] = field(default_factory=list)  # the entry point's arguments, arrays expanded
    unresolved: dict[str, str] = field(default_factory=dict)  # text the shell would compute -> why not here
    computed: dict[str, str] = field(default_factory=dict)  # variable -> why its value is not known here

    def note(self, text: str, why: str) -> None:
        self.unresolved.setdefault(text, why)


def read_script(path: Path) -> Script:
    """Parse a launch script (and the scripts it sources); ImportProblem when no train.py command is found."""
    script = Script(path)
    _read(script, path, depth=0)
    if script.entry is None:
        raise ImportProblem(str(path), "", f"no `python3 {' / '.join(ENTRY_POINTS)} ...` command found: not a "
                            "slime launch script")
    return script


def _text(path: Path, source: str) -> str:
    try:
        return read_text_bounded(path)
    except FileNotFoundError:
        raise ImportProblem(source, "", f"{path}: file not found") from None
    except (YamlInputError, OSError, UnicodeDecodeError) as exc:
        raise ImportProblem(source, "", f"{path}: cannot read: {getattr(exc, 'message', exc)}") from None


def _logical_lines(text: str) -> list[str]:
    """Lines with backslash continuations joined; array bodies `( ... )` joined into their assignment."""
    joined = re.sub(r"\\\r?\n", " ", text).splitlines()
    out: list[str] = []
    buffer: list[str] = []
    depth = 0
    for line in joined:
        if buffer:
            buffer.append(line)
            depth += _paren_balance(line)
            if depth <= 0:
                out.append("\n".join(buffer))
                buffer, depth = [], 0
            continue
        stripped = line.strip()
        if _ARRAY.match(stripped):
            depth = _paren_balance(stripped)
            if depth > 0:
                buffer = [stripped]
                continue
        out.append(stripped)
    if buffer:
        out.append("\n".join(buffer))
    return out


def _paren_balance(line: str) -> int:
    """( minus ) outside quotes and comments (a `)` inside `$(...)` pairs with its `(`)."""
    balance, quote = 0, None
    for i, ch in enumerate(line):
        if quote:
            if ch == quote:
                quote = None
            continue
        if ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1].isspace()):
            break
        elif ch == "(":
            balance += 1
        elif ch == ")":
            balance -= 1
    return balance


def _read(script: Script, path: Path, depth: int) -> None:
    if depth > MAX_SOURCES:
        script.note(str(path), f"more than {MAX_SOURCES} nested `source`s: not followed")
        return
    block = 0  # inside if / for / while: what is set there depends on the machine the script runs on
    for line in _logical_lines(_text(path, str(script.path))):
        if not line or line.startswith("#"):
            continue
        if _BLOCK_OPEN.match(line):
            block += 1
            continue
        if _BLOCK_CLOSE.match(line):
            block = max(0, block - 1)
            continue
        if block and (match := _ASSIGN.match(line)) is not None:
            name = match.group(1)
            script.variables[name] = UNRESOLVED
            script.computed.setdefault(name, "set inside an if / for block of the script (depends on the machine)")
            continue
        if (match := _ARRAY.match(line)) is not None:
            body = line[match.end():]
            body = body[: body.rfind(")")] if ")" in body else body
            script.arrays[match.group(1)] = _expand_tokens(script, _split(script, body, line))
        elif (match := _SOURCE.match(line)) is not None:
            _source(script, path, match.group(1), depth)
        elif (match := _ASSIGN.match(line)) is not None:
            _assign(script, path, match.group(1), match.group(2).strip())
        elif line.startswith("printf -v "):
            name = line.split()[2]
            script.variables[name] = UNRESOLVED
            script.computed[name] = "computed by the script's printf"
        elif script.entry is None or depth == 0:
            _command(script, line)


def _assign(script: Script, path: Path, name: str, raw: str) -> None:
    if "BASH_SOURCE" in raw:  # SCRIPT_DIR="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" ... && pwd)"
        script.variables[name] = str(path.parent)
        return
    if "$(" in raw or "`" in raw:
        script.variables[name] = UNRESOLVED
        script.computed[name] = f"a command substitution, not run ({' '.join(raw.split())[:50]})"
        return
    try:
        tokens = shlex.split(raw, comments=True, posix=True)
    except ValueError:  # a quoted value spanning lines (a JSON blob): nothing rlsim reads
        script.variables[name] = UNRESOLVED
        script.computed[name] = "a multi-line value"
        return
    if len(tokens) != 1:
        script.variables[name] = " ".join(tokens)
        return
    value = _expand(script, tokens[0], name)
    script.variables[name] = value if value is not None else UNRESOLVED


def _source(script: Script, path: Path, raw: str, depth: int) -> None:
    tokens = _split(script, raw, raw)
    target = _expand(script, tokens[0]) if tokens else None
    if target is None or "$" in target:
        script.note(f"source {raw}", "the sourced path depends on variables the shell computes: not read")
        return
    file = Path(target)
    if not file.is_absolute():
        file = path.parent / file
    if not file.is_file():
        script.note(f"source {raw}", f"{file} not found: its flags are missing")
        return
    script.sourced.append(file)
    _read(script, file, depth + 1)


def _command(script: Script, line: str) -> None:
    """`... python3 train.py ARGS`: the entry point and its arguments, `${ARR[@]}` expanded."""
    if not any(entry in line for entry in ENTRY_POINTS):
        return
    protected, subs = _protect_substitutions(line)
    try:
        tokens = [_restore(t, subs) for t in shlex.split(protected, comments=True, posix=True)]
    except ValueError as exc:
        raise ImportProblem(str(script.path), "", f"the {' / '.join(ENTRY_POINTS)} command cannot be split as "
                            f"shell words ({exc}): {' '.join(line.split())[:80]}") from None
    for i, token in enumerate(tokens):
        if Path(token).name in ENTRY_POINTS:
            script.entry = Path(token).name
            script.args = _expand_tokens(script, tokens[i + 1:])
            return


def _split(script: Script, text: str, where: str) -> list[str]:
    """shlex tokens, with each command substitution `$(...)` kept as one token (never run)."""
    protected, subs = _protect_substitutions(text)
    try:
        tokens = shlex.split(protected, comments=True, posix=True)
    except ValueError as exc:
        script.note(where.strip()[:80], f"cannot split as shell words ({exc})")
        return []
    return [_restore(t, subs) for t in tokens]


def _closing(text: str, start: int, opening: str, closing: str) -> int:
    """Index of the bracket that closes the one at `start` (nested pairs counted), or len(text) if none does."""
    depth, j = 0, start
    while j < len(text):
        depth += {opening: 1, closing: -1}.get(text[j], 0)
        if depth == 0:
            break
        j += 1
    return j


def _protect_substitutions(text: str) -> tuple[str, list[str]]:
    subs: list[str] = []
    out, i = [], 0
    while i < len(text):
        if text.startswith("$(", i):
            j = _closing(text, i + 1, "(", ")")
            subs.append(text[i: j + 1])
            out.append(f"\x01{len(subs) - 1}\x01")
            i = j + 1
        else:
            out.append(text[i])
            i += 1
    return "".join(out), subs


def _restore(token: str, subs: list[str]) -> str:
    return re.sub(r"\x01(\d+)\x01", lambda m: subs[int(m.group(1))], token)


def _expand_tokens(script: Script, tokens: list[str]) -> list[str]:
    out: list[str] = []
    for token in tokens:
        whole = re.fullmatch(r"\$\{([A-Za-z_]\w*)\[[@*]\]\}", token)
        if whole is not None:
            name = whole.group(1)
            if name in script.arrays:
                out.extend(script.arrays[name])
            else:
                script.note(token, "an array the script does not define: its flags are missing")
            continue
        if token.startswith("$(") and token.endswith(")"):
            script.note(token, "a command substitution, never run")
            out.append(token)
            continue
        value = _expand(script, token)
        out.append(token if value is None else value)
    return out


def _expand(script: Script, token: str, owner: str | None = None) -> str | None:
    """`token` with `${VAR}`, `${VAR:-default}` (defaults nested) and `$VAR` expanded; None when a variable is
    unresolved (noted, or passed on to `owner`, the variable being assigned)."""
    out: list[str] = []
    i = 0
    while i < len(token):
        if token.startswith("${", i):
            j = _closing(token, i + 1, "{", "}")
            inner, i = token[i + 2: j], j + 1
            name = re.match(r"[A-Za-z_]\w*", inner)
            if name is None:
                return _unresolved(script, "${" + inner + "}", "not a plain variable", owner)
            rest = inner[name.end():]
            default = rest.split("-", 1)[1] if rest.startswith((":-", "-")) else None
            value = _lookup(script, name.group(0), default, owner)
        elif token[i] == "$" and (name := re.match(r"[A-Za-z_]\w*", token[i + 1:])) is not None:
            i += 1 + name.end()
            value = _lookup(script, name.group(0), None, owner)
        else:
            out.append(token[i])
            i += 1
            continue
        if value is None:
            return None
        out.append(value)
    return "".join(out)


def _lookup(script: Script, name: str, default: str | None, owner: str | None) -> str | None:
    value = script.variables.get(name)
    if value is None and default is not None:
        return _expand(script, default.strip("\"'"), owner)
    if value is None:
        return _unresolved(script, f"${{{name}}}", "not set by the script (the environment's): unresolved", owner)
    if value == UNRESOLVED:
        return _unresolved(script, f"${{{name}}}", script.computed.get(name, "computed by the shell"), owner)
    return value


def _unresolved(script: Script, text: str, why: str, owner: str | None) -> None:
    if owner is not None:
        script.computed.setdefault(owner, f"from {text}: {why}")
    else:
        script.note(text, why)
    return None


def flags_of(tokens: list[str]) -> tuple[dict[str, object], list[str]]:
    """argparse-style: `--flag` then its values up to the next flag; a repeated flag: the last wins. Returns the
    flags (True for a bare flag, one value, or a list) and the tokens before the first flag (stray)."""
    flags: dict[str, object] = {}
    stray: list[str] = []
    name = None
    values: list[str] = []

    def close() -> None:
        if name is not None:
            flags[name] = True if not values else _scalar(values[0]) if len(values) == 1 else \
                [_scalar(v) for v in values]

    for token in tokens:
        if token.startswith("--") and len(token) > 2:
            close()
            name, _, inline = token.partition("=")
            values = [inline] if inline else []
        elif name is None:
            stray.append(token)
        else:
            values.append(token)
    close()
    return flags, stray


def _scalar(text: str) -> object:
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text
