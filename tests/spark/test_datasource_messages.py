"""What Spark hands back to the data source (partitions, commit messages) is checked to be
the reader's / writer's own kind: a foreign object is a typed error, not an AttributeError.
No SparkSession needed."""

from __future__ import annotations

import pytest
from pyspark.sql.datasource import InputPartition, WriterCommitMessage

from lance_sql.errors import InvalidInputError
from lance_sql.spark.datasource import (
    ChangePartition,
    LanceCommitMessage,
    ReadPartition,
    _own_messages,
    _own_partition,
)


def test_own_partition_returns_the_planned_kind() -> None:
    part = ReadPartition(())
    assert _own_partition(part, ReadPartition) is part


@pytest.mark.parametrize("foreign", [ChangePartition(()), InputPartition(0)])
def test_foreign_partition_is_a_typed_error(foreign: InputPartition) -> None:
    with pytest.raises(InvalidInputError, match="expected a ReadPartition"):
        _own_partition(foreign, ReadPartition)


def test_own_messages_skip_tasks_that_sent_none() -> None:
    first, second = LanceCommitMessage([b"a"], ["k1"]), LanceCommitMessage([], [])
    assert _own_messages([None, first, None, second]) == [first, second]
    assert _own_messages([]) == []


def test_foreign_commit_message_is_a_typed_error() -> None:
    with pytest.raises(InvalidInputError, match="not a lance commit message"):
        _own_messages([LanceCommitMessage(), WriterCommitMessage()])
