"""Exceptions the pipeline raises; ``jobs/`` maps each class to an exit code."""


class MicroaggError(Exception):
    """Base class of every error microagg reports to its users."""

    exit_code = 1


class InputError(MicroaggError, ValueError):
    """The input data or the options are not acceptable (the message says what and where)."""

    exit_code = 2


class CSVTypeChange(InputError):
    """A CSV column's values change type part-way through the input: Dask guessed the column's type
    from the first rows (numbers), and a later row holds text, or an empty cell in a column of whole
    numbers, or a decimal in a column of whole numbers and empty cells. The callers read the input
    again with every column's type decided from all its rows (``pipeline.io.csv_types``)."""


class CSVParseError(InputError):
    """A row of a CSV input cannot be parsed (more fields than the header, a quote left open), as
    pandas reports it for the block of the file that holds it; ``pipeline.io.locate_parse_error``
    names the file and the line."""


class ReleaseGateError(MicroaggError):
    """The release failed a check (k-anonymity, row count) and was not written."""

    exit_code = 3


class ClusterError(MicroaggError):
    """The Dask cluster could not be reached or started; nothing was written."""

    exit_code = 4


class ScratchSpaceError(MicroaggError):
    """Data a stage must hold (the rows in transit, an evaluation's QIs) fits neither in the job's memory nor
    in the free space of its scratch directory: the job stops before that stage instead of running out of
    memory in it. Its message does not say what was written (the command adds it: a job file's evaluation
    runs after its release is committed)."""

    exit_code = 5
    says_what_was_written = False


class OutputBusyError(MicroaggError):
    """Another job on this host is writing the same output now; this one wrote nothing."""

    exit_code = 6


class StorageError(MicroaggError):
    """A filesystem refused a write after the release was committed (its report beside it): the message
    says what was written. (Other storage failures are the ``OSError`` itself: ``jobs.exit_codes``.)"""

    exit_code = 5
