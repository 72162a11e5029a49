"""`kanin server`'s settings layered: command line over environment over config file over
default, each option found generically from the argparse parser; bad values named with
where they came from. No sockets: the parser and the BrokerConfig only."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import pytest

from kanin.cli.layers import (
    Layered,
    SettingError,
    env_name,
    flag_of,
    layer,
    settable_options,
)
from kanin.cli.main import OptionError, build_parser, server_config
from kanin.config import BrokerConfig, UserSpec


def layered(
    argv: list[str],
    environ: dict[str, str] | None = None,
    toml: str | None = None,
    directory: Path | None = None,
) -> Layered:
    """`kanin server ARGV` with that environment and, if given, that config file."""
    parser = build_parser()
    argv = ["server", *argv]
    environ = dict(environ or {})
    if toml is not None:
        assert directory is not None
        path = directory / "settings.toml"
        path.write_text(toml)
        environ["KANIN_CONFIG"] = str(path)
    args = parser.parse_args(argv)
    return layer(parser, args.options_parser, argv, args, environ)


def server_options() -> dict[str, argparse.Action]:
    parser = build_parser()
    return settable_options(parser.parse_args(["server"]).options_parser)


# -- precedence --------------------------------------------------------------------------


def test_command_line_over_environment_over_file_over_default(tmp_path: Path) -> None:
    toml = "port = 1111\nmgmt_port = 2222\nheartbeat = 3333\n"
    environ = {"KANIN_PORT": "4444", "KANIN_MGMT_PORT": "5555"}
    result = layered(["--port", "6666"], environ, toml, tmp_path)
    values = result.values
    assert (values.port, values.mgmt_port, values.heartbeat) == (6666, 5555, 3333)
    assert values.prometheus_port == 15692  # nobody set it: the default
    assert result.origin_note("port") == ""  # the command line is not worth a note
    assert result.origin_note("mgmt_port") == " (from environment variable KANIN_MGMT_PORT)"
    assert result.origin_note("heartbeat") == f" (from heartbeat in {tmp_path}/settings.toml)"
    assert result.config_file == tmp_path / "settings.toml"


def test_a_command_line_value_equal_to_the_default_still_wins() -> None:
    values = layered(["--port", "5672"], {"KANIN_PORT": "1"}).values
    assert values.port == 5672


def test_every_server_option_is_settable_from_environment_and_file(tmp_path: Path) -> None:
    # Generic: a flag added to `kanin server` later is covered without touching this test.
    for dest, action in server_options().items():
        if dest == "config":
            continue
        text, toml, expected = sample_value(action)
        from_env = layered([], {env_name(dest): text}).values
        assert getattr(from_env, dest) == expected, flag_of(action)
        from_file = layered([], {}, f"{dest} = {toml}\n", tmp_path).values
        assert getattr(from_file, dest) == expected, flag_of(action)


def sample_value(action: argparse.Action) -> tuple[str, str, Any]:
    """(environment text, TOML text, value) of a value unlike the option's default."""
    if action.nargs == 0:
        return ("true", "true", True) if action.default is not True else ("0", "false", False)
    if action.choices is not None:
        choice = next(c for c in action.choices if c != action.default)
        return str(choice), f'"{choice}"', choice
    if action.type is int:
        return "7", "7", 7
    if action.type is float:
        return "2.5", "2.5", 2.5
    if action.type is Path:
        return "some/where", '"some/where"', Path("some/where")
    return "text", '"text"', "text"


def test_kanin_toml_in_the_current_directory_is_read_when_there(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert layered([]).config_file is None
    (tmp_path / "kanin.toml").write_text("heartbeat = 9\n")
    result = layered([])
    assert result.values.heartbeat == 9
    assert result.config_file == Path("kanin.toml")


def test_config_option_over_kanin_config_variable(tmp_path: Path) -> None:
    (tmp_path / "a.toml").write_text("heartbeat = 1\n")
    (tmp_path / "b.toml").write_text("heartbeat = 2\n")
    environ = {"KANIN_CONFIG": str(tmp_path / "b.toml")}
    assert layered(["--config", str(tmp_path / "a.toml")], environ).values.heartbeat == 1
    assert layered([], environ).values.heartbeat == 2


def test_switches_from_the_environment_take_the_usual_words() -> None:
    for word, expected in [("1", True), ("yes", True), ("ON", True), ("false", False)]:
        values = layered([], {"KANIN_FORCE_RECOVERY": word}).values
        assert values.force_recovery is expected


def test_a_number_option_takes_an_integer_for_a_float_in_the_file(tmp_path: Path) -> None:
    values = layered([], {}, "queue_memory_mb = 8\n", tmp_path).values
    assert values.queue_memory_mb == 8.0
    assert isinstance(values.queue_memory_mb, float)


# -- errors naming the option and the place ----------------------------------------------


@pytest.mark.parametrize(
    ("toml", "message"),
    [
        ("mgmt-port = 1\n", "unknown key 'mgmt-port' (did you mean 'mgmt_port'?)"),
        ("colour = 1\n", "unknown key 'colour'; the keys are: port, bind"),
        ("config = 'x.toml'\n", "unknown key 'config'"),
        ("port = '5672'\n", "--port from port in {file}: wants an integer (unquoted in TOML)"),
        ("port = 1.5\n", "--port from port in {file}: wants an integer, got float 1.5"),
        ("force_recovery = 1\n", "--force-recovery from force_recovery in {file}: wants true"),
        ("heartbeat = true\n", "wants an integer, got bool True"),
        ("log_level = 'loud'\n", "wants one of debug, info, warning, error, got 'loud'"),
        ("bind = 127\n", "--bind from bind in {file}: wants a string, got int 127"),
        ("[tls]\nport = 1\n", "unknown key 'tls'"),
        ("port = \n", "{file}: not valid TOML: "),
    ],
)
def test_a_bad_file_names_the_file_and_the_key(tmp_path: Path, toml: str, message: str) -> None:
    with pytest.raises(SettingError) as error:
        layered([], {}, toml, tmp_path)
    assert message.format(file=tmp_path / "settings.toml") in str(error.value)


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        ("KANIN_PORT", "x", "--port from environment variable KANIN_PORT: wants an integer"),
        ("KANIN_SEGMENT_MB", "big", "--segment-mb from environment variable KANIN_SEGMENT_MB: "),
        ("KANIN_FORCE_RECOVERY", "maybe", "wants true or false"),
        ("KANIN_LOG_LEVEL", "loud", "--log-level from environment variable KANIN_LOG_LEVEL"),
    ],
)
def test_a_bad_environment_variable_is_named(name: str, text: str, message: str) -> None:
    with pytest.raises(SettingError) as error:
        layered([], {name: text})
    assert message in str(error.value)


def test_a_named_config_file_must_exist(tmp_path: Path) -> None:
    with pytest.raises(SettingError, match=r"^--config .*missing.toml: no such file$"):
        layered(["--config", str(tmp_path / "missing.toml")])
    with pytest.raises(SettingError, match=r"^KANIN_CONFIG .*: is a directory$"):
        layered([], {"KANIN_CONFIG": str(tmp_path)})


def test_a_bad_value_in_range_checks_is_traced_to_its_origin(tmp_path: Path) -> None:
    result = layered([], {}, "mgmt_port = 70000\n", tmp_path)
    with pytest.raises(OptionError) as error:
        server_config(result.values)
    assert str(error.value) == "--mgmt-port must be 0..65535, got 70000"
    assert result.origin_note(error.value.dest) == f" (from mgmt_port in {tmp_path}/settings.toml)"


# -- the first user ----------------------------------------------------------------------


def test_default_user_and_pass_make_the_first_administrator() -> None:
    values = layered([], {"KANIN_DEFAULT_USER": "admin", "KANIN_DEFAULT_PASS": "s3cret"}).values
    assert server_config(values).default_users == (UserSpec("admin", "s3cret"),)


def test_without_them_guest_is_the_first_user() -> None:
    assert server_config(layered([]).values).default_users == BrokerConfig().default_users


def test_a_password_alone_is_guests_as_on_rabbitmq() -> None:
    values = layered([], {"KANIN_DEFAULT_PASS": "other"}).values
    assert server_config(values).default_users == (UserSpec("guest", "other"),)


@pytest.mark.parametrize(
    ("environ", "dest", "message"),
    [
        ({"KANIN_DEFAULT_USER": "admin"}, "default_user", "--default-user needs a password"),
        ({"KANIN_DEFAULT_USER": "", "KANIN_DEFAULT_PASS": "x"}, "default_user", "empty"),
        ({"KANIN_DEFAULT_USER": "a", "KANIN_DEFAULT_PASS": ""}, "default_pass", "empty"),
    ],
)
def test_an_unusable_first_user_is_refused(
    environ: dict[str, str], dest: str, message: str
) -> None:
    with pytest.raises(OptionError) as error:
        server_config(layered([], environ).values)
    assert error.value.dest == dest
    assert message in str(error.value)
