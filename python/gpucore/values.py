"""Checks of plain values, shared by config keys and function arguments. A leaf module."""


def is_int(value) -> bool:
    """An integer, but not a bool (which Python counts as one)."""
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value) -> bool:
    """An int or float, but not a bool."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)
