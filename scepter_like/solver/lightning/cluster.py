"""``JoinedEnvironment``: the process group that the native loop's own join made, told to Lightning.

Under torchrun or srun the Lightning path joins exactly as the native loop does
(``init_distributed``: the same ranks, devices, rendezvous, backend and timeout; SLURM's
variables read the same way).  Lightning then finds the group made and only needs to be
told where each process sits: this cluster environment says so, and that the processes
were started outside it.
"""

from scepter_like.solver.lightning.library import import_lightning
from scepter_like.utils.launch_env import DEFAULT_PORT

pl = import_lightning()


class JoinedEnvironment(pl.plugins.ClusterEnvironment):
    """A DistInfo (``init_distributed``'s) and its launch variables as Lightning's cluster environment."""

    def __init__(self, info, launch, processes_per_node):
        super().__init__()
        self.info, self.launch, self.processes_per_node = info, launch, processes_per_node

    @property
    def creates_processes_externally(self):
        return True

    @property
    def main_address(self):
        return self.launch.master_addr or '127.0.0.1'

    @property
    def main_port(self):
        return int(self.launch.master_port or DEFAULT_PORT)

    @staticmethod
    def detect():
        return True

    def world_size(self):
        return self.info.world_size

    def set_world_size(self, size):
        """The group is made: Lightning's count is the group's."""

    def global_rank(self):
        return self.info.rank

    def set_global_rank(self, rank):
        """The group is made: Lightning's rank is the group's."""

    def local_rank(self):
        return self.info.local_rank

    def node_rank(self):
        return self.info.rank // self.processes_per_node
