"""User-facing error types.

Every error a user can cause by a bad config, a bad name or a bad file derives from
:class:`UserError`.  The command-line tools catch ``UserError`` and print it as one
``error: ...`` line with exit status 2; anything else is a bug and keeps its traceback.
"""

import difflib
import inspect


class UserError(Exception):
    """A mistake in the user's input: printed as one line, exit status 2."""


def user_message(error):
    """A UserError's message on one line (the CLI's ``error:`` line says it).

    One raised in a DataLoader worker comes back inside torch's wrapping text, whose last
    line (``module.DataError: message``) holds it.
    """
    text = str(error)
    if text.startswith('Caught ') and 'in DataLoader worker process' in text:
        last = text.strip().splitlines()[-1]
        text = last.split(': ', 1)[1] if ': ' in last else last
    return ' '.join(text.split('\n'))


class ConfigError(UserError):
    """A config value, key or file is wrong."""


class RegistryError(ConfigError):
    """A ``NAME`` names nothing in its registry."""


class CheckpointError(UserError):
    """A checkpoint or weights file cannot be used."""


class DataError(UserError):
    """Input data does not fit what the model or dataset needs."""


class ModelError(UserError, ValueError):
    """A model's own code does not fit its problem (a field or residual of the wrong shape, a derivative of a
    coordinate or output there is none of); a ValueError too, as these were before they became one line."""


class DistributedError(UserError):
    """The distributed setup cannot run (world size, rendezvous, ...)."""


class TrainingError(UserError):
    """Training cannot go on (for example too many non-finite losses in a row)."""


class ComponentError(Exception):
    """A user's component (an IMPORTS module, a dataset, a model, a hook ...) raised its own exception.

    Not a mistake in the input, so not a UserError: the tools print ``error: <component>
    raised <type>: <message>`` as the first line, then the component's own traceback, and
    exit with status 1.  The exception is the ``error`` it wraps (also ``__cause__``).
    """

    def __init__(self, component, error):
        self.component = component
        self.error = error
        super().__init__(f'{component} raised {type(error).__name__}: {error}')


class Preempted(Exception):
    """Training stopped on a signal (SIGTERM, SIGUSR1, SIGINT): after writing a checkpoint marked
    ``latest``, or during set-up, before any train step, with no checkpoint (``checkpoint`` None).

    Not a mistake: the tools exit with ``128 + signum``, the shell's status of a signalled
    process, so a scheduler can tell it from success (0) and errors (1, 2).
    """

    def __init__(self, signum, step=None, checkpoint=None, work_dir=None):
        import signal

        self.signum = signum
        self.step = step
        self.checkpoint = checkpoint
        name = signal.Signals(signum).name
        if checkpoint is None:
            message = (
                f'stopped by {name} during set-up, before training began; no checkpoint written'
                ' (latest, if any, is as it was); rerun the same command to go on'
            )
        else:
            message = (
                f'stopped by {name} after step {step}; checkpoint {checkpoint} is latest;'
                # the run's folder too: a WORK_DIR made per run (a time stamp, as make train and a notebook do) is new
                f' rerun with {f"SOLVER.WORK_DIR={work_dir} " if work_dir else ""}SOLVER.RESUME_FROM=auto to continue'
            )
        super().__init__(message)

    @property
    def exit_status(self):
        return 128 + self.signum


class RunPruned(Exception):
    """A search pruned the run after an evaluation (``PruningHook``): it ends there on purpose, not failed; its
    metrics.jsonl gets a line of kind ``pruned`` and its log an INFO line saying so."""


def suggest(word, candidates, n=3, cutoff=0.6):
    """Return ``"; did you mean X?"`` for the closest candidates (a candidate that differs only in case first:
    ``batch_size`` for BATCH_SIZE), or ``""``."""
    same = [str(c) for c in candidates if str(c).lower() == str(word).lower() and str(c) != str(word)]
    names = list(dict.fromkeys(str(c) for c in candidates))  # (a registry may list a name twice)
    close = same or difflib.get_close_matches(str(word), names, n=n, cutoff=cutoff)
    if not close:
        return ''
    return '; did you mean ' + ' or '.join(close) + '?'


def class_of(obj):
    """``class Name, path/to/file.py`` of ``obj``'s class: where to fix a component that breaks its contract."""
    cls = type(obj)
    try:
        where = inspect.getsourcefile(cls) or inspect.getfile(cls)
    except (TypeError, OSError):
        where = cls.__module__
    return f'class {cls.__qualname__}, {where}'
