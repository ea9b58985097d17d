"""The bench's timing-aware modes order from a trace of the model on the cluster it runs on."""

import pytest


@pytest.mark.tf
def test_tao_orders_from_a_trace_of_worker_0_alone(tmp_path):
    from tfsched.analysis import analyze
    from tfsched.bench.run import SOLO_STEPS, local_side_by_side, mode_configs
    from tfsched.enforce.api import OPTIMIZER_NAME, schedule_priorities
    from tfsched.models import build_graph

    # TAO alone, without a baseline: the trace comes from a vanilla session of its own, which
    # also initializes the variables (no other session did).
    results = local_side_by_side(
        "seq32", workers=2, modes=("tao",), steps=2, rounds=1, batch_size=4, measure=False
    )
    res = results["tao"]
    assert res.steps == 4 and res.throughput > 0
    trace = res.order_trace
    assert trace is not None and trace.steps == SOLO_STEPS and trace.meta["alone"]
    worker0 = [o for o in trace.ops if "/job:worker/replica:0/task:0/" in o.device]
    assert worker0 and not any("/job:worker/replica:0/task:1/" in o.device for o in trace.ops)
    assert trace.transfers  # the pulls it waited for

    # The pass gets the order `tfsched analyze --trace` gives with that trace; the other modes'
    # configs do not wait for one.
    built = build_graph("seq32", worker_task=0, ps_tasks=1, batch_size=4, mode="train")
    path = str(tmp_path / "seq32.pb")
    with open(path, "wb") as f:
        f.write(built.graph_def().SerializeToString())
    configs = mode_configs(("baseline", "tio", "tao", "tao+pc"), path, built.fetches)
    assert configs["baseline"] is None and not callable(configs["tio"])
    assert callable(configs["tao"]) and callable(configs["tao+pc"])
    config = configs["tao"](trace)
    (opt,) = [o for o in config.graph_options.rewrite_options.custom_optimizers if o.name == OPTIMIZER_NAME]
    given = [s.decode() for s in opt.parameter_map["priorities"].list.s]
    expected = schedule_priorities(
        analyze(
            path, fetches=built.fetches, algorithm="tao", trace=str(tmp_path / "seq32-tao.trace.json")
        ).schedule.to_json()
    )
    assert given and given == expected
