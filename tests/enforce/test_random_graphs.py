"""Random PS graphs, trained with tfsched and without on a real cluster: bitwise the same.

The built-in models are chains and fans of layers; these graphs are not
(``benchmarks/random_graphs.py`` makes them: conditionals, while loops, control dependencies, ops
placed back on a PS, another worker's tensors, ref and resource variables, four optimizers). Each
is trained three steps and run once for its loss alone (a pruned step) without tfsched, again
without it (TensorFlow's own runs must agree to the last bit, else nothing is tested), and with
tfsched under one of the pass's settings in turn. The losses and the final variables are
compared byte for byte, and the gates must have run.
"""

import pytest

from tests.enforce.conftest import within
from tests.helpers import benchmark_script

pytestmark = [pytest.mark.tf, pytest.mark.cluster]

graphs = benchmark_script("random_graphs")


# 0 to 9: one a setting of the pass; 113: a loop on a worker with one loop variable from a PS and a
# loop invariant read from the same PS, whose Exit the pass ordered before that read on the
# channel: the step waited for the gates' timeout (the benchmark's deadline of 20 s ended it);
# 181 and 194: a sum of gradients sent to a PS took over another input's buffer than
# TensorFlow's, and added in another order (cc/scheduler.cc, HeldFromSums); 133: that, and two
# sums Grappler merged without tfsched only (the pass gated before Grappler's last iteration)
@pytest.mark.parametrize("seed", [*range(len(graphs.SETTINGS)), 113, 133, 181, 194])
def test_a_random_graph_trains_the_same_to_the_last_bit(cluster, seed):
    box = within(300, lambda: graphs.compare(cluster.target("worker", 0), seed))
    assert "error" not in box, box.get("error")
    verdict, gates, what = box["value"]
    assert verdict != "vanilla differs", f"TensorFlow's own runs differ ({what}): nothing to compare with"
    settings = graphs.SETTINGS[seed % len(graphs.SETTINGS)]
    assert gates > 0, f"no gate ran ({what}, {settings})"
    assert verdict == "same", f"{what}, {settings}"
