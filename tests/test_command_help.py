"""``--help`` of the commands users run: each paragraph of a command's description reads as
one paragraph, wrapped by the terminal, not cut where its docstring's lines end."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from typer.testing import CliRunner

from fairgpu.cli import app
from fairgpu.commands import command_help, explain, jobs, queues, what_if


@pytest.mark.parametrize(
    ("name", "command"),
    [("explain", explain), ("queues", queues), ("jobs", jobs), ("what-if", what_if)],
)
def test_each_paragraph_of_a_commands_help_is_one_line_on_a_wide_terminal(
    name: str, command: Callable[..., object]
) -> None:
    result = CliRunner().invoke(app, [name, "--help"], env={"COLUMNS": "220"})
    assert result.exit_code == 0, result.output
    lines = [" ".join(line.split()) for line in result.output.splitlines()]
    paragraphs = command_help(command).split("\n\n")
    assert len(paragraphs) >= 2 and len(paragraphs[1]) > 80  # a paragraph longer than a line
    for paragraph in paragraphs:
        assert paragraph in lines, (paragraph, result.output)
