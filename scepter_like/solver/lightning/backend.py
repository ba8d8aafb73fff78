"""``LightningBackend``: the solver's loop on Lightning's Trainer (``ENV.USE_PL: true``).

The solver builds it in ``set_up_pre`` and hands over three moments:

- ``join()`` (set-up): the Trainer from ``ENV.PL``, and the processes.  Under torchrun or
  srun the native loop's own join makes the process group (``JoinedEnvironment`` tells
  Lightning); otherwise Lightning's own launcher starts one process per device (``DEVICES:
  2`` re-runs the command once more) and Lightning makes the group.  The solver's set-up
  (data, model, optimizer, resume) then runs in every process as in the native loop.
- ``run()`` (``solve``): a pending evaluation, ``trainer.fit`` over the epochs left,
  ``solver.solve_test()``.
- ``run_pass(mode)``: an evaluation or test outside fit, through ``trainer.validate`` / ``test``.

Signals keep the native behaviour (solver/preemption.py): Lightning's own handlers are
replaced by the solver's at the start of each of its loops (``StopSignals.reinstall``).
"""

import contextlib
import datetime
import inspect
import logging
import os
import warnings

from scepter_like.errors import ConfigError, Preempted
from scepter_like.solver.lightning.cluster import JoinedEnvironment
from scepter_like.solver.lightning.library import import_lightning
from scepter_like.solver.lightning.module import SolverModule
from scepter_like.solver.lightning.settings import PRECISIONS, check_precision, check_strategy, passed_through
from scepter_like.solver.optimization import AMP_DTYPES
from scepter_like.utils.distributed import DistInfo, all_gather_object, barrier, init_distributed
from scepter_like.utils.launch_env import process_rank, read_launch_env
from scepter_like.utils.logger import get_logger

pl = import_lightning()

LOOP_METHODS = ('solve', 'solve_train', 'run_train', 'solve_eval', 'run_eval', 'run_test')  # Lightning's, here
LIGHTNING_LOGGERS = ('lightning.pytorch', 'lightning.fabric', 'pytorch_lightning', 'lightning_fabric')
QUIETED = (  # Lightning's notices about what this backend chose on purpose, or about torch's version: no action
    '.*`dataloader_iter`',  # the training step pulls its batch (module.py says why)
    r'.*isinstance\(treespec, LeafSpec\)',
)


def _started_by_lightning():
    """A process Lightning's launcher started: LOCAL_RANK from it, and no RANK (torchrun always sets one)."""
    return 'LOCAL_RANK' in os.environ and 'RANK' not in os.environ


class LightningBackend:
    """Lightning's Trainer and the ``SolverModule`` that runs ``solver``'s steps and stages in it."""

    def __init__(self, solver):
        self.solver = solver
        self.env = solver.env_cfg
        cfg = solver.cfg
        for name in LOOP_METHODS:
            if solver.overrides(name):
                raise ConfigError(
                    f"{cfg.path_of('NAME')}: {type(solver).__name__} overrides {name}, which Lightning's loop"
                    ' replaces under ENV.USE_PL; do that work in run_step_* or a hook, or set ENV.USE_PL false'
                )
        if cfg.PARALLEL != 'ddp':
            raise ConfigError(
                f'{cfg.path_of("PARALLEL")}: {cfg.PARALLEL} is not supported under ENV.USE_PL (Lightning wraps the'
                ' model in DDP); set it to ddp, or ENV.USE_PL false'
            )
        self.strategy = check_strategy(self.env.PL, pl.strategies.StrategyRegistry.available_strategies())
        # Lightning's INFO lines are start-up chatter (the run's log tells the device, world and model), except what
        # TRAINER turns on: the profiler's report and the model summary, which Lightning writes at INFO
        trainer_cfg = self.env.PL.TRAINER
        shown = bool(trainer_cfg.get('profiler')) or bool(trainer_cfg.get('enable_model_summary'))
        for name in LIGHTNING_LOGGERS:
            logging.getLogger(name).setLevel(logging.INFO if shown else logging.WARNING)
        self.trainer = None
        self.module = None

    # -- set-up -----------------------------------------------------------------------------------
    def join(self):
        """The Trainer, and this process's place in the run (a DistInfo), as ``set_up_environment`` asks."""
        launch = read_launch_env()
        if launch.launcher != 'none' and not _started_by_lightning():  # torchrun / srun started the processes
            env = self.env
            info = init_distributed(backend=env.BACKEND, timeout_s=env.DIST_TIMEOUT, device=env.DEVICE)
            per_node = max(all_gather_object(info.local_rank)) + 1
            self.trainer = self._build_trainer(info.world_size, per_node, JoinedEnvironment(info, launch, per_node))
            return info
        self.trainer = self._build_trainer(1, 1)
        strategy = self.trainer.strategy
        if strategy.launcher is not None:
            if self.env.NUM_THREADS > 0:  # else the launcher sets cpu_count // processes threads in every process
                os.environ.setdefault('OMP_NUM_THREADS', str(self.env.NUM_THREADS))
            strategy.launcher.launch(lambda: None)  # Lightning's own launcher: the other local ranks start here
        strategy.setup_environment()  # joins the process group (DDP), sets the device
        import torch.distributed as dist

        trainer = self.trainer
        info = DistInfo(
            rank=trainer.global_rank,
            world_size=trainer.world_size,
            local_rank=trainer.local_rank,
            device=strategy.root_device,
            backend=dist.get_backend() if dist.is_initialized() else '',
        )
        if info.rank != process_rank():  # the console of a rank > 0: warnings only, prefixed (as under torchrun)
            get_logger(self.solver.logger.name, rank=info.rank)
        return info

    def _build_trainer(self, world, per_node, joined=None):
        """The Trainer of ``ENV.PL`` for ``world`` processes, ``per_node`` on each node (both 1 when Lightning is to
        start them); ``joined``: the cluster environment of a group already made."""
        pl_cfg, env, cfg = self.env.PL, self.env, self.solver.cfg
        devices = per_node if pl_cfg.DEVICES == 'auto' else pl_cfg.DEVICES
        num_nodes = world // per_node if pl_cfg.NUM_NODES == 'auto' else pl_cfg.NUM_NODES
        count = len(devices) if isinstance(devices, list) else devices
        if joined is not None and isinstance(count, int) and isinstance(num_nodes, int) and count * num_nodes != world:
            raise ConfigError(
                f'{pl_cfg.path_of("DEVICES")} ({devices}) x {pl_cfg.path_of("NUM_NODES")} ({num_nodes}) does not'
                f' match the {world} processes torchrun / srun started; leave both auto'
            )
        if joined is None and isinstance(num_nodes, int) and num_nodes > 1 and 'NODE_RANK' not in os.environ:
            raise ConfigError(
                f'{pl_cfg.path_of("NUM_NODES")}: {num_nodes} nodes, but nothing started the others (no torchrun, srun'
                ' or NODE_RANK): the run would wait for them until ENV.DIST_TIMEOUT; launch it with torchrun / srun'
                ' on every node, or leave NUM_NODES auto'
            )
        arguments = passed_through(pl_cfg, set(inspect.signature(pl.Trainer.__init__).parameters) - {'self'})
        strategy = self.strategy
        if not isinstance(count, int) or count > 1 or num_nodes != 1:  # several processes: DDP, the native keys'
            strategy = pl.strategies.DDPStrategy(
                find_unused_parameters=cfg.FIND_UNUSED_PARAMETERS,
                process_group_backend=env.BACKEND or None,
                timeout=datetime.timedelta(seconds=env.DIST_TIMEOUT),
            )
        arguments.update(
            accelerator=pl_cfg.ACCELERATOR or self._native_accelerator(),
            devices=devices,
            num_nodes=num_nodes,
            strategy=strategy,
            plugins=[joined] if joined is not None else None,
            precision='32-true',  # the updater runs AMP (autocast, GradScaler) as in the native loop
            max_epochs=-1,  # the solver's progress decides the end (Trainer.should_stop)
            num_sanity_val_steps=0,
            check_val_every_n_epoch=1,  # each epoch's validation runs only when due (PassBatches)
            use_distributed_sampler=False,
            inference_mode=False,
            enable_checkpointing=False,
            logger=False,
            default_root_dir=self.solver.work_dir,
        )
        arguments.setdefault('enable_progress_bar', False)  # LogHook shows progress
        arguments.setdefault('enable_model_summary', False)  # the run summary shows the model
        try:
            return pl.Trainer(**arguments)
        except (
            ValueError,
            TypeError,
            RuntimeError,
            ImportError,
            pl.utilities.exceptions.MisconfigurationException,
        ) as e:
            first = ' '.join(str(e).split()) or type(e).__name__
            raise ConfigError(f"{pl_cfg.path}: Lightning's Trainer rejects these settings: {first}") from None

    def _native_accelerator(self):
        """The accelerator the native loop's device pick means: ENV.DEVICE's type, else cuda where available."""
        import torch

        device = self.env.DEVICE
        if device and torch.device(device).index is not None:
            raise ConfigError(
                f'{self.env.path_of("DEVICE")}: {device!r} names a device index; under ENV.USE_PL give'
                ' ENV.PL.DEVICES: [index] and ENV.PL.ACCELERATOR instead'
            )
        if device:
            return torch.device(device).type
        return 'cuda' if torch.cuda.is_available() else 'cpu'

    # -- the run ----------------------------------------------------------------------------------
    def run(self, every_epoch=False, test=True):
        """What ``solve`` runs: a pending evaluation, the epochs left (``trainer.fit``), the test (``test``)."""
        solver, progress = self.solver, self.solver.progress
        if every_epoch:
            raise ConfigError('solve(every_epoch=True) is not supported under ENV.USE_PL (test once, at the end)')
        self._check_update()
        if progress.epoch_finished:  # resumed between an epoch and its evaluation
            if solver.eval_due():
                solver.solve_eval()
            progress.next_epoch()
        if 'train' in solver.datas and not progress.train_finished():
            module = self._module()
            with self._lightning_call():
                self.trainer.fit(module, train_dataloaders=module.train_batches, val_dataloaders=module.passes['eval'])
        if test and 'test' in solver.datas:
            solver.solve_final_test()

    def run_pass(self, mode):
        """An evaluation or test pass outside fit: Lightning's validate / test loop over the solver's steps."""
        module = self._module()
        module.passes[mode].due = True
        loop = self.trainer.validate if mode == 'eval' else self.trainer.test
        with self._lightning_call():
            loop(module, dataloaders=module.passes[mode], verbose=False)

    def _module(self):
        if self.module is None:
            self.module = SolverModule(self.solver)
        return self.module

    def _check_update(self):
        """The update's settings fit Lightning: PRECISION names what the native keys set; with several processes
        the built-in update steps (a backward outside it would not be all-reduced by Lightning's DDP)."""
        solver = self.solver
        autocast = solver.updater.settings.autocast_dtype
        amp = next((name for name, dtype in AMP_DTYPES.items() if dtype is autocast), None)
        check_precision(self.env.PL, PRECISIONS[amp or solver.cfg.DTYPE])
        if solver.world_size > 1 and 'train' in solver.datas and not solver.updater.active:
            raise ConfigError(
                f'{solver.cfg.path_of("TRAIN_HOOKS")}: under ENV.USE_PL with {solver.world_size} processes the'
                " solver's own update must step the optimizer (this project's BackwardHook): a backward taken"
                " elsewhere (scepter's BackwardHook, STEPS_OPTIMIZER_ITSELF) would not be all-reduced"
            )

    @contextlib.contextmanager
    def _lightning_call(self):
        """Around a Trainer call: the native outcome of a signal, the model back on the run's device."""
        try:
            with warnings.catch_warnings():
                for message in QUIETED:
                    warnings.filterwarnings('ignore', message=message)
                yield
        except Preempted:
            barrier()  # rank 0's checkpoint is written before any process ends (Lightning's launcher watches them)
            raise
        except SystemExit as e:  # Lightning ends a KeyboardInterrupt (a second SIGINT) with sys.exit(1)
            if isinstance(e.__context__, KeyboardInterrupt):
                raise e.__context__ from None
            raise
        finally:
            self.solver.unwrapped_model.to(self.solver.device)  # Lightning's teardown moves it to the CPU
