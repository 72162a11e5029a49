"""`kanin server`'s settings from four places, each over the next: the command line, the
environment, a TOML config file, the option's default.

Nothing here knows the options: every option of the argparse parser gets an environment
variable (`--mgmt-port` is KANIN_MGMT_PORT) and a key in the file (its dest, `mgmt_port`),
and a value from either is converted and checked as argparse would the command line's, so
a new flag needs no work here. `--config` says which file (also KANIN_CONFIG); without
either, ./kanin.toml is read when it exists.
"""

from __future__ import annotations

import argparse
import difflib
import shlex
import tomllib
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ENV_PREFIX = "KANIN_"
CONFIG_DEST = "config"  # the option naming the file is not a key in it
DEFAULT_CONFIG_FILE = Path("kanin.toml")
TRUE_WORDS = frozenset({"1", "true", "yes", "on"})
FALSE_WORDS = frozenset({"0", "false", "no", "off"})


class SettingError(Exception):
    """A value from the environment or the config file the option cannot take; the
    message names the option and where the value came from."""


def env_name(dest: str) -> str:
    return ENV_PREFIX + dest.upper()


def flag_of(action: argparse.Action) -> str:
    """The option's longest spelling, as a user reads it in --help: `--mgmt-port`."""
    return max(action.option_strings, key=len)


def settable_options(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    """Every option that takes a setting, by dest: not --help, not positionals."""
    return {
        action.dest: action
        for action in parser._actions  # argparse keeps them nowhere public
        if action.option_strings
        and action.dest != argparse.SUPPRESS
        and not isinstance(action, argparse._HelpAction | argparse._VersionAction)
    }


@dataclass
class Layered:
    """The options' values, and where each came from unless the command line or the
    default: "environment variable KANIN_PORT", "port in /etc/kanin.toml"."""

    values: argparse.Namespace
    origins: dict[str, str] = field(default_factory=dict)
    config_file: Path | None = None

    def origin_note(self, dest: str) -> str:
        origin = self.origins.get(dest)
        return f" (from {origin})" if origin else ""


def layer(
    parser: argparse.ArgumentParser,
    options: argparse.ArgumentParser,
    argv: list[str],
    parsed: argparse.Namespace,
    environ: Mapping[str, str],
) -> Layered:
    """`parsed` is what `parser` made of `argv` (usage errors and --help are its
    business); the options of `options`, a subparser, take values from the other layers
    where the command line left them at their defaults."""
    actions = settable_options(options)
    given = given_on_command_line(parser, options, argv)
    layered = Layered(parsed)
    config_file = chosen_config_file(parsed, given, environ)
    sources: list[tuple[str, dict[str, Any]]] = []
    if config_file is not None:
        layered.config_file = config_file
        sources.append(("file", read_config_file(config_file, actions)))
    sources.append(("env", from_environment(environ, actions)))
    for kind, values in sources:  # later sources win
        for dest, value in values.items():
            if dest in given:
                continue
            setattr(parsed, dest, value)
            layered.origins[dest] = (
                f"environment variable {env_name(dest)}"
                if kind == "env"
                else f"{dest} in {config_file}"
            )
    return layered


def given_on_command_line(
    parser: argparse.ArgumentParser, options: argparse.ArgumentParser, argv: list[str]
) -> set[str]:
    """The dests the command line sets: parsed again with no defaults, so a value given
    equal to its default still counts as given."""
    with _defaults_suppressed(settable_options(options).values()):
        namespace, _ = parser.parse_known_args(argv)
    return set(vars(namespace)) & set(settable_options(options))


@contextmanager
def _defaults_suppressed(actions: Any) -> Iterator[None]:
    saved = [(action, action.default) for action in actions]
    for action, _ in saved:
        action.default = argparse.SUPPRESS
    try:
        yield
    finally:
        for action, default in saved:
            action.default = default


def chosen_config_file(
    parsed: argparse.Namespace, given: set[str], environ: Mapping[str, str]
) -> Path | None:
    """--config, else KANIN_CONFIG (either must exist), else ./kanin.toml if it exists."""
    if CONFIG_DEST in given:
        return _existing(Path(getattr(parsed, CONFIG_DEST)), "--config")
    if environ.get(env_name(CONFIG_DEST)):
        return _existing(Path(environ[env_name(CONFIG_DEST)]), env_name(CONFIG_DEST))
    return DEFAULT_CONFIG_FILE if DEFAULT_CONFIG_FILE.is_file() else None


def _existing(path: Path, named_by: str) -> Path:
    if not path.exists():
        raise SettingError(f"{named_by} {path}: no such file")
    if path.is_dir():
        raise SettingError(f"{named_by} {path}: is a directory")
    return path


def read_config_file(path: Path, actions: dict[str, argparse.Action]) -> dict[str, Any]:
    """The file's settings by dest, each converted; SettingError naming the file and key."""
    try:
        with open(path, "rb") as file:
            document = tomllib.load(file)
    except OSError as exc:
        raise SettingError(f"{path}: cannot read: {exc.strerror}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise SettingError(f"{path}: not valid TOML: {exc}") from None
    values: dict[str, Any] = {}
    for key, value in document.items():
        action = actions.get(key) if key != CONFIG_DEST else None
        if action is None:
            raise SettingError(f"{path}: unknown key {key!r}{_did_you_mean(key, actions)}")
        values[key] = from_toml(action, value, f"{key} in {path}")
    return values


def _did_you_mean(key: str, actions: dict[str, argparse.Action]) -> str:
    keys = [dest for dest in actions if dest != CONFIG_DEST]
    close = difflib.get_close_matches(key.replace("-", "_").lower(), keys, n=1)
    return f" (did you mean {close[0]!r}?)" if close else f"; the keys are: {', '.join(keys)}"


def from_environment(
    environ: Mapping[str, str], actions: dict[str, argparse.Action]
) -> dict[str, Any]:
    return {
        dest: from_text(action, environ[env_name(dest)], f"environment variable {env_name(dest)}")
        for dest, action in actions.items()
        if dest != CONFIG_DEST and env_name(dest) in environ
    }


# -- converting one value as argparse would ------------------------------------------------


def from_text(action: argparse.Action, text: str, origin: str) -> Any:
    """An environment variable's text: a switch's true/false, a list's words (shell
    quoting), else one value converted by the option's type."""
    if _is_switch(action):
        word = text.strip().lower()
        if word not in TRUE_WORDS | FALSE_WORDS:
            raise _wrong(action, origin, "true or false (1/0, yes/no, on/off)", text)
        return word in TRUE_WORDS
    if _takes_list(action):
        return [_converted(action, word, origin) for word in shlex.split(text)]
    return _converted(action, text, origin)


def from_toml(action: argparse.Action, value: Any, origin: str) -> Any:
    """A config file's value: a switch takes a boolean, a list option an array, else the
    TOML type the option's type reads (integer, number, string)."""
    if _is_switch(action):
        if not isinstance(value, bool):
            raise _wrong(action, origin, "true or false", value)
        return value
    if _takes_list(action):
        if not isinstance(value, list):
            raise _wrong(action, origin, "an array", value)
        return [_scalar_from_toml(action, item, origin) for item in value]
    return _scalar_from_toml(action, value, origin)


def _scalar_from_toml(action: argparse.Action, value: Any, origin: str) -> Any:
    kind = action.type
    if isinstance(value, str):
        if kind in (int, float):  # TOML has numbers: "5672" is a mistake worth naming
            raise _wrong(action, origin, f"{_wanted(action)} (unquoted in TOML)", value)
        return _converted(action, value, origin)
    if kind is int and isinstance(value, int) and not isinstance(value, bool):
        return _checked_choice(action, value, origin)
    if kind is float and isinstance(value, int | float) and not isinstance(value, bool):
        return _checked_choice(action, float(value), origin)
    raise _wrong(action, origin, _wanted(action), value)


def _converted(action: argparse.Action, text: str, origin: str) -> Any:
    convert = action.type
    if convert is None or isinstance(convert, str):
        value: Any = text
    else:
        try:
            value = convert(text)
        except (TypeError, ValueError, argparse.ArgumentTypeError):
            raise _wrong(action, origin, _wanted(action), text) from None
    return _checked_choice(action, value, origin)


def _checked_choice(action: argparse.Action, value: Any, origin: str) -> Any:
    if action.choices is not None and value not in action.choices:
        wanted = "one of " + ", ".join(str(choice) for choice in action.choices)
        raise _wrong(action, origin, wanted, value)
    return value


def _is_switch(action: argparse.Action) -> bool:
    """A flag without a value that sets True or False (store_true, --x/--no-x)."""
    if action.nargs != 0:
        return False
    if isinstance(action, argparse.BooleanOptionalAction) or isinstance(action.const, bool):
        return True
    raise TypeError(f"{flag_of(action)}: a flag setting {action.const!r} cannot be layered")


def _takes_list(action: argparse.Action) -> bool:
    return isinstance(action, argparse._AppendAction) or action.nargs in ("*", "+") or (
        isinstance(action.nargs, int) and action.nargs > 1
    )


def _wanted(action: argparse.Action) -> str:
    if action.choices is not None:
        return "one of " + ", ".join(str(choice) for choice in action.choices)
    if action.type is int:
        return "an integer"
    return "a number" if action.type is float else "a string"


def _wrong(action: argparse.Action, origin: str, wanted: str, value: Any) -> SettingError:
    shown = repr(value) if isinstance(value, str) else f"{type(value).__name__} {value!r}"
    return SettingError(f"{flag_of(action)} from {origin}: wants {wanted}, got {shown}")
