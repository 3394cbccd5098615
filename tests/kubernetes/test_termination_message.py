"""The test kubelet's termination message, checked against kubelet's rules (pod_termination.py): the last
4096 bytes of the file, or, with FallbackToLogsOnError and an empty file, the log's last 80 lines up to
2048 bytes for a failed container only."""

from __future__ import annotations

from pathlib import Path

from pod_termination import termination_file, termination_message


def test_kubelet_keeps_the_tail_and_falls_back_to_the_log_only_when_asked(tmp_path: Path) -> None:
    log = tmp_path / "log.txt"
    log.write_text("".join(f"line {i}\n" for i in range(200)))
    first = termination_file(tmp_path / "c")
    assert first.stat().st_mode & 0o777 == 0o666 and first.read_bytes() == b""
    assert termination_file(tmp_path / "c") != first  # a restart gets a new file
    first.write_bytes(b"a" * 5000 + b"END")
    assert termination_message(first, "File", 1, log) == ("a" * 5000 + "END")[-4096:]
    empty = termination_file(tmp_path / "d")
    assert termination_message(empty, "File", 1, log) == ""
    assert termination_message(empty, "FallbackToLogsOnError", 0, log) == ""
    tail = termination_message(empty, "FallbackToLogsOnError", 1, log)
    assert tail.endswith("line 199\n") and tail.startswith("line 120\n") and len(tail) <= 2048
