"""The roles' command-line flags accept what the settings accept."""
import typing

import pytest

from blendserve.cli import parser
from blendserve.core.config import Settings


@pytest.mark.parametrize("role", ["serve", "scheduler"])
def test_every_planner_the_settings_accept_is_a_flag(role):
    accepted = typing.get_args(Settings.model_fields["planner"].annotation)
    assert set(accepted) == {"blendserve", "dfs", "fcfs"}
    for planner in accepted:
        assert parser().parse_args([role, "--planner", planner]).planner == planner


def test_an_unknown_planner_is_refused(capsys):
    with pytest.raises(SystemExit) as e:
        parser().parse_args(["serve", "--planner", "lpm"])
    assert e.value.code == 2
    assert "invalid choice: 'lpm'" in capsys.readouterr().err
