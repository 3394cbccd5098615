"""The image IDs a run's nodes reported: one line when they agree, a warning when they do not (issue 15)."""

from __future__ import annotations

from trainctl.runs.image_ids import NOT_REPORTED, image_ids, image_lines, same_key, short
from trainctl.runs.state import Images

A = "sha256:" + "a" * 64
B = "sha256:" + "b" * 64


def test_agreeing_nodes_give_one_id_and_no_warning() -> None:
    details = image_ids({"p-1": A, "p-0": A}, "pod")
    assert details == Images(ids={"p-0": A, "p-1": A}, same=A)
    assert image_lines(details) == [f"image ID: {A} (all of p-0, p-1)"]


def test_the_same_image_in_podman_and_cri_words_agrees() -> None:
    """podman prints the bare config digest, a CRI runtime `sha256:<digest>`: one image."""
    details = image_ids({"n1": "a" * 64, "n2": A}, "node")
    assert details is not None and details.warning is None and same_key(A) == "a" * 64
    assert same_key("docker-pullable://" + A) == "a" * 64


def test_two_images_in_one_run_is_a_warning_naming_each_group() -> None:
    details = image_ids({"p-0": A, "p-1": B, "p-2": A}, "pod")
    assert details is not None and details.same is None
    warning = details.warning
    assert warning is not None
    assert warning.startswith("the pods of this run ran 2 different images (")
    assert f"({'a' * 12} on p-0, p-2; {'b' * 12} on p-1)" in warning
    lines = image_lines(details)
    assert lines[:3] == [f"image ID of p-0: {A}", f"image ID of p-1: {B}", f"image ID of p-2: {A}"]
    assert lines[3] == f"WARNING: {warning}" and len(lines) == 4


def test_nodes_that_report_nothing_say_so() -> None:
    details = image_ids({"n2": "", "n1": ""}, "node")
    assert details == Images(ids={"n1": "", "n2": ""})
    assert image_lines(details) == [f"image ID: {NOT_REPORTED} (n1, n2)"]
    # one reported, one not: each said, no warning (not reported is not a second image), no single id
    mixed = image_ids({"n1": A, "n2": ""}, "node")
    assert mixed is not None and mixed.same is None and mixed.warning is None
    assert image_lines(mixed) == [f"image ID of n1: {A}", f"image ID of n2: {NOT_REPORTED}"]


def test_no_nodes_no_details() -> None:
    assert image_ids({}, "pod") is None and image_lines(None) == []


def test_short_ids_tell_repo_digests_apart() -> None:
    assert short(A) == "a" * 12 == short("a" * 64)
    assert short("ghcr.io/x/trainer@sha256:" + "c" * 64) == "ghcr.io/x/trainer@" + "c" * 12
