"""tpx._scrub: credential echoes removed from reply text and parsed values."""

from __future__ import annotations

from typing import Any

from tpx._scrub import DeltaScrubber, Scrubber, _decode
from tpx.errors import secret_forms

SECRET = "sk-ant-echo'0123456789abcdef"


def _scrubber() -> Scrubber:
    return Scrubber(secret_forms([SECRET]))


def test_reply_text_is_cleaned_and_escapes_flagged() -> None:
    scrub = _scrubber()
    data, walk = scrub.reply(b'{"a": "x' + SECRET.encode() + b'y"}')
    assert SECRET.encode() not in data
    assert b"[REDACTED]" in data
    assert not walk
    _, walk = scrub.reply(b'{"a": "\\u0041"}')
    assert walk
    text, walk = scrub.text("echo " + SECRET)
    assert text == "echo [REDACTED]"
    assert not walk


def test_values_are_cleaned_everywhere_without_recursion() -> None:
    scrub = _scrubber()
    value: Any = {"k": [SECRET, {"deep": "a" + SECRET}], SECRET: 1, "n": [1, None, True]}
    cleaned = scrub.value(value)
    assert cleaned == {
        "k": ["[REDACTED]", {"deep": "a[REDACTED]"}],
        "[REDACTED]": 1,
        "n": [1, None, True],
    }
    assert SECRET in value["k"]  # the input is not modified
    untouched = {"a": ["b"]}
    assert scrub.value(untouched) is untouched
    nested: Any = SECRET
    for _ in range(10_000):
        nested = [nested]
    out = scrub.value(nested)
    for _ in range(10_000):
        out = out[0]
    assert out == "[REDACTED]"


def test_no_secrets_no_work() -> None:
    assert not Scrubber(())
    assert Scrubber(()).reply(b"abc") == (b"abc", False)


def test_the_decoded_view_of_json_text_maps_back_to_it() -> None:
    decoded, offsets, unfinished = _decode('a\\/b\\u00e9\\ud83d\\ude00\\n"')
    assert decoded == 'a/b\u00e9\U0001f600\n"'
    assert offsets == [0, 1, 3, 4, 10, 22, 24, 25]
    assert unfinished is None
    for text, start in (("ab\\", 2), ("ab\\u00", 2), ("ab\\ud83d", 2), ("a\\ud83d\\u12", 1)):
        decoded, offsets, unfinished = _decode(text)
        assert (decoded, unfinished, offsets[-1]) == (text[:start], start, start)


def test_a_delta_end_that_could_begin_a_secret_is_held_then_released() -> None:
    scrub = _scrubber()
    assert scrub.split("", "say sk-ant") == ("say ", "sk-ant")
    assert scrub.split("sk-ant", "-echo'0123456789abcdef!") == ("[REDACTED]!", "")
    assert scrub.split("", "nothing to hold") == ("nothing to hold", "")
    # partial_json: read as the JSON the caller decodes, an unfinished escape held too
    assert scrub.split("", '{"a":"\\u0073k-ant', json_text=True) == ('{"a":"', "\\u0073k-ant")
    assert scrub.split("", '{"a":"x\\u00', json_text=True) == ('{"a":"x', "\\u00")
    ready, keep = scrub.split('"\\u0073k', '-ant-echo\\u00270123456789abcdef"}', json_text=True)
    assert (ready, keep) == ('"[REDACTED]"}', "")


def test_deltas_are_delivered_whole_once_the_block_ends() -> None:
    hold = DeltaScrubber(_scrubber())

    def delta(text: str) -> dict[str, Any]:
        return {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "text_delta", "text": text},
        }

    out = hold.events([delta("a s"), delta("k"), {"type": "content_block_stop", "index": 0}])
    assert [e.get("delta", {}).get("text") for e in out] == ["a ", "sk", None]
    assert out[-1] == {"type": "content_block_stop", "index": 0}
    clean = delta("no secret here")
    assert hold.events([clean])[0] is clean  # as it came


def test_a_joined_scrubber_knows_both() -> None:
    scrub = Scrubber(secret_forms(["first-secret-0001"]))
    both = scrub.joined(secret_forms(["second-secret-0002"]))
    assert both.clean("first-secret-0001 second-secret-0002") == "[REDACTED] [REDACTED]"
    assert scrub.clean("second-secret-0002") == "second-secret-0002"  # the first is as it was
    assert both.split("", "a second-se") == ("a ", "second-se")
