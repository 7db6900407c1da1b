"""The NRI plugin's options: from ``numamem nri``'s flags, and from the runtime's config string.

A pre-launched plugin gets no command line: containerd runs ``plugin_path/IDX-NAME`` with an
empty environment but for ``NRI_PLUGIN_*`` and passes the contents of
``plugin_config_path/IDX-NAME.conf`` (or ``NAME.conf``) as ``Configure``'s config. That
config is a YAML mapping whose keys are the long flags without their dashes
(:data:`CONFIG_KEYS`)::

    socket: /run/numamem/numamem.sock
    on-reject: unpinned
    log-level: debug

It is applied over the flags (so an external plugin may be given one too); an empty config
changes nothing. The plugin never refuses its configuration: containerd 1.7 exits when a
pre-launched plugin fails to configure ("failed to start NRI interface"), taking the node's
runtime down for a typo. An unknown key or a bad value is logged (naming the key, the value,
what is allowed and the file) and left out; the other keys apply
(:func:`apply_config_leniently`). The text is read within the bounds of ``--config``
(:func:`numamem.config.yamlbounds.load_mapping`: nesting depth, values with aliases
expanded), so a short config cannot name a large amount of work.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from numamem.config.yamlbounds import load_mapping
from numamem.errors import PATH_QUOTE_BYTES, ConfigError, quote

DEFAULT_DAEMON_SOCKET = "/run/numamem/numamem.sock"
ON_REJECT = ("fail", "unpinned")
LOG_LEVELS = ("debug", "info", "warning", "error")
LOG_FORMATS = ("json", "console")


@dataclass(frozen=True)
class PluginOptions:
    """What the plugin does; see ``numamem nri --help``."""

    socket: str = DEFAULT_DAEMON_SOCKET
    """The daemon's socket."""
    on_reject: str = "fail"
    """A container numamem does not admit (or cannot reach the daemon for): ``fail`` its
    creation with the reason, or start it ``unpinned`` (logged and counted)."""
    log_level: str = "info"
    log_format: str = "json"
    log_file: str = "-"
    """Where the log goes (:mod:`numamem.nri.logsink`): ``-`` stderr, ``syslog``, or a file."""

    def __post_init__(self) -> None:
        _one_of("on-reject", self.on_reject, ON_REJECT)
        _one_of("log-level", self.log_level, LOG_LEVELS)
        _one_of("log-format", self.log_format, LOG_FORMATS)
        if not self.socket:
            raise ConfigError("socket: the daemon's socket path must not be empty")
        if not self.log_file:
            raise ConfigError("log-file: must not be empty (- for stderr, syslog, or a file)")


CONFIG_KEYS = {
    "socket": "socket",
    "on-reject": "on_reject",
    "log-level": "log_level",
    "log-format": "log_format",
    "log-file": "log_file",
}
"""Config string key -> :class:`PluginOptions` field."""


def apply_config(
    options: PluginOptions, text: str, source: str = "the runtime's config"
) -> PluginOptions:
    """``options`` with the YAML mapping ``text`` applied (see the module docstring)."""
    doc = _load(text, source)
    return _apply(options, doc, source) if doc else options


def apply_config_leniently(
    options: PluginOptions, text: str, source: str = "the runtime's config"
) -> tuple[PluginOptions, list[ConfigError]]:
    """``options`` with every key of ``text`` that is right applied, and what was wrong
    (each key alone: one bad key does not cost the others; text that is not a mapping
    changes nothing). The text is read once."""
    try:
        doc = _load(text, source)
    except ConfigError as err:
        return options, [err]
    errors = []
    for key, value in (doc or {}).items():
        try:
            options = _apply(options, {key: value}, source)
        except ConfigError as err:
            errors.append(err)
    return options, errors


def _load(text: str, source: str) -> dict[object, object] | None:
    """The config's mapping; None for an empty config."""
    if not text.strip():
        return None
    loaded = load_mapping(text, source, ", ".join(CONFIG_KEYS))
    return loaded[0] if loaded is not None else None


def _apply(options: PluginOptions, doc: dict[object, object], source: str) -> PluginOptions:
    """``options`` with the keys of ``doc`` set; ``ConfigError`` at the first that is wrong."""
    changes: dict[str, str] = {}
    for key, value in doc.items():
        attr = CONFIG_KEYS.get(str(key))
        if attr is None:
            raise ConfigError(
                f"{source}: unknown key {quote(str(key))}; the keys are {', '.join(CONFIG_KEYS)} "
                "(numamem nri's long flags without the dashes)"
            )
        if not isinstance(value, str):
            raise ConfigError(
                f"{source}: {key}: {quote(value)} is a {type(value).__name__}, expected a string"
            )
        changes[attr] = value
    try:
        return replace(options, **changes)
    except ConfigError as err:
        raise ConfigError(f"{source}: {err}") from None


def _one_of(key: str, value: str, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise ConfigError(
            f"{key}: {quote(value, limit=PATH_QUOTE_BYTES)} is not one of {', '.join(allowed)}"
        )
