"""trainer.launcher.privileges on this host: who the launcher would drop to, and the hand-over of /opt/ml.

The drop itself (setuid in a container started as root) runs in tests/image/test_root_drop.py.
"""

from __future__ import annotations

import os
import pwd
from pathlib import Path

import pytest
from trainer.launcher import privileges

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the drop only happens when started as root")
NOBODY = pwd.getpwnam("nobody")


def test_outside_the_image_nothing_is_dropped() -> None:
    assert privileges.trainer_account({}) is None  # no TRAINCTL_TRAINER_UID: a host, not the image


def test_in_the_image_the_named_user_is_the_account() -> None:
    account = privileges.trainer_account({privileges.UID_ENV: str(NOBODY.pw_uid)})
    assert account is not None and account.pw_name == "nobody"


def test_keep_root_and_unknown_uids_stay_root(capsys: pytest.CaptureFixture[str]) -> None:
    assert privileges.trainer_account({privileges.UID_ENV: str(NOBODY.pw_uid), privileges.KEEP_ROOT_ENV: "1"}) is None
    assert privileges.trainer_account({privileges.UID_ENV: "4000000"}) is None
    assert "names no user of this image; staying root" in capsys.readouterr().err


def test_hand_over_gives_sagemakers_folders_to_the_trainer(tmp_path: Path) -> None:
    channel = tmp_path / "opt/ml/input/data/train"
    channel.mkdir(parents=True, mode=0o700)
    (channel / "part-0").write_text("x")
    (tmp_path / "opt/ml/model").mkdir(parents=True)
    privileges.hand_over(tmp_path, NOBODY.pw_uid, NOBODY.pw_gid)
    for path in (channel, channel / "part-0", tmp_path / "opt/ml/model", tmp_path / "opt/ml/input"):
        assert (path.stat().st_uid, path.stat().st_gid) == (NOBODY.pw_uid, NOBODY.pw_gid), path
    assert tmp_path.stat().st_uid == 0  # only SageMaker's folders, nothing around them
