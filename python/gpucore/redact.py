"""Credentials in URIs, masked wherever gpucore records or shows a value (docs: Security).

A URI's userinfo (`https://alice:TOKEN@host` -> `https://***@host`) and the values of its query or fragment
parameters whose names say they are secret (token, key, secret, password, sig, access_token, api_key, X-Amz-Signature,
...) become `***`; the rest of the text stays as it was, byte for byte. `masked` takes any text (a value, an error
message) and `masked_values` any nested dicts and lists (a config, a checkpoint): every file gpucore writes through
`checkpoint.write_json`/`write_snapshot`, the report's config table, the loggers' hyperparameters, the ONNX sidecar and
the command line's errors and warnings pass through them. The real value is used only to connect (MLflow's tracking
URI) or to build (a factory's model_kwargs). A value read back from a run's files holds the mask: `holds_mask` finds it, so that gpucore asks for the real
value instead of using the masked one.
"""
from __future__ import annotations

import copy
import re
from typing import Any

MASK = "***"

# A URI in any text: scheme://, then up to whitespace or a quote (a value in a message is quoted).
_URI = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*://[^\s'\"<>`]+")
# The userinfo: everything up to the last @ before the path, query or fragment.
_USERINFO = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]*://)([^/?#]*)@")
# A parameter of the query or fragment: (separator, name, value).
_PARAMETER = re.compile(r"([?&;#])([^=&;#?]+)=([^&;#]*)")
# The words of a parameter's name (api_key, apiKey, X-Amz-Signature -> api key, api key, x amz signature).
_WORD = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|\d+")
# A word that names a secret; and parts of a word that do, where names run words together (accesstoken, clientsecret).
_SECRET_WORDS = {"key", "sig", "signature", "pwd", "pass", "auth", "authorization", "credential", "credentials", "jwt",
                 "sas"}
_SECRET_PARTS = ("token", "secret", "passw", "apikey", "accesskey", "signature", "credential")


def is_secret_name(name: str) -> bool:
    """Whether a URI parameter named `name` carries a secret (token, api_key, X-Amz-Signature, sig, ...)."""
    words = [word.lower() for word in _WORD.findall(name)]
    return any(word in _SECRET_WORDS or any(part in word for part in _SECRET_PARTS) for word in words)


def _masked_uri(uri: str) -> str:
    uri = _USERINFO.sub(lambda m: f"{m.group(1)}{MASK}@", uri)
    return _PARAMETER.sub(lambda m: f"{m.group(1)}{m.group(2)}={MASK}" if is_secret_name(m.group(2)) else m.group(0),
                          uri)


def _masks_in(uri: str) -> bool:
    userinfo = _USERINFO.match(uri)
    return ((userinfo is not None and userinfo.group(2) == MASK)
            or any(is_secret_name(name) and value == MASK for _, name, value in _PARAMETER.findall(uri)))


def masked(text: str) -> str:
    """`text` with every URI in it masked: userinfo and secret parameters' values replaced by `***`."""
    return _URI.sub(lambda m: _masked_uri(m.group(0)), text)


def masked_values(value: Any) -> Any:
    """`value` (nested dicts, lists and tuples of strings and anything else) with every string `masked`; the object
    itself where nothing changed (a model's state dict keeps its type and metadata)."""
    if isinstance(value, str):
        return masked(value)
    if isinstance(value, dict):
        changed = {key: new for key, item in value.items() if (new := masked_values(item)) is not item}
        if not changed:
            return value
        result = copy.copy(value)
        result.update(changed)
        return result
    if type(value) in (list, tuple):
        items = [masked_values(item) for item in value]
        return value if all(new is old for new, old in zip(items, value)) else type(value)(items)
    return value


def holds_mask(value: Any) -> bool:
    """Whether `value` (nested as for masked_values) holds a URI whose credentials gpucore masked: read back from a
    run's files, not the real value."""
    if isinstance(value, str):
        return any(_masks_in(uri) for uri in _URI.findall(value))
    if isinstance(value, dict):
        return any(holds_mask(item) for item in value.values())
    if isinstance(value, (list, tuple)):
        return any(holds_mask(item) for item in value)
    return False


def masked_value_message(key: str, value: Any, elsewhere: str = "") -> str:
    """What a ConfigError says of config key `key` whose `value` holds the mask (holds_mask); `elsewhere`: another
    place the real value may come from."""
    return (f"config key '{key}' is {masked_values(value)!r}, as a run's files record it: its credentials were masked "
            f"({MASK}), and gpucore never connects or builds with a masked value. Give the real value: --set "
            f"{_masked_entry(key, value)}=... or in the config{elsewhere}")


def _masked_entry(name: str, value: Any) -> str:
    """The dotted name of the first entry of `value` that holds the mask (model_kwargs.weights_url), as --set takes
    it; `name` itself for a string or a list."""
    if isinstance(value, dict):
        for key, item in value.items():
            if holds_mask(item):
                return _masked_entry(f"{name}.{key}", item)
    return name
