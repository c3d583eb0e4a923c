"""An error is blamed where it arose: in the target (naming the unit and the function that raised) or, when its
frames never left the suite's own code, in the property - never a pass either way."""

from __future__ import annotations

from typing import Any

from pdverify.plugin import raised_in

SUITE = "/site/pdverify/properties/test_fake.py"
PORT = "/site/pdverify/production/fake_port.py"
SGLANG = "/site/sglang/srt/disaggregation/fake.py"


def _caught(source: str, filename: str, **env: Any) -> BaseException:
    namespace: dict[str, Any] = dict(env)
    exec(compile(source, filename, "exec"), namespace)
    runner = "def run():\n    try:\n        body()\n    except Exception as exc:\n        return exc\n"
    exec(compile(runner, SUITE, "exec"), namespace)
    exc = namespace["run"]()
    assert isinstance(exc, BaseException)
    return exc


def test_an_error_in_the_property_body_is_the_propertys() -> None:
    exc = _caught("def body():\n    raise TypeError('replace() got multiple values')\n", SUITE)
    message = raised_in(exc, ("prefill_exchange",))
    assert message.startswith("error in the property, not the target"), message
    assert "raised in body" in message and "TypeError: replace() got multiple values" in message


def test_an_error_inside_the_target_names_the_unit_and_the_function() -> None:
    unit: dict[str, Any] = {}
    exec(compile("def unit():\n    raise ValueError('bad page')\n", PORT, "exec"), unit)
    exc = _caught("def body():\n    unit()\n", SUITE, unit=unit["unit"])
    message = raised_in(exc, ("prefill_exchange",))
    assert message.startswith("target error in unit prefill_exchange; raised in unit (" + PORT), message


def test_an_error_in_sglang_names_sglangs_function() -> None:
    sg: dict[str, Any] = {}
    exec(compile("def pop_preallocated():\n    raise AttributeError('no clear')\n", SGLANG, "exec"), sg)
    exc = _caught("def body():\n    pop_preallocated()\n", SUITE, pop_preallocated=sg["pop_preallocated"])
    message = raised_in(exc, ("decode_queue",))
    assert "raised in pop_preallocated (sglang/srt/disaggregation/fake.py:2)" in message, message
