"""Lenient JSON: a model's near-JSON read, its quoting repaired and nothing else."""
import pytest

from passepartout.lenient import loads_lenient
from passepartout.proto import ProtoError


def test_lenient_json_reports_the_standard_reason():
    with pytest.raises(ProtoError) as e:
        loads_lenient('{"a": 1 "b": 2}')
    assert "Expecting ',' delimiter" in str(e.value), str(e.value)
    assert loads_lenient("{'a': 'x\ny',}") == {"a": "x\ny"}, "single quotes, raw newline, trailing comma"


def test_repair_only_changes_quoting():
    assert loads_lenient('{"content": "print("hi")"}') == {"content": 'print("hi")'}, "inner quotes"
    assert loads_lenient("{'a': None, 'b': True}") == {"a": None, "b": True}, "a Python dict"
    assert loads_lenient('{"cmd": ls -la}') == {"cmd": "ls -la"}, "a value left unquoted: quoting only"
    for broken in ['{"a": 1 "b": 2}', '{"a": [1, 2}', '{"cmd": "ls", "x"}', "{Placeholder}"]:
        with pytest.raises(ProtoError):
            loads_lenient(broken)
