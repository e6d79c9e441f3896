"""The one exception type for a user's mistake.

A `UsageError` is something the user can fix (a bad flag or value, an unreadable or
damaged file they named): the CLI prints its message as one line and exits 2.
Everything else is a bug and surfaces as one, with its traceback.
"""


class UsageError(Exception):
    """A mistake in what the user asked for or pointed at; the message says what to fix."""
