import json, sys, subprocess, os, tempfile, time
from pathlib import Path
from bench.adversity_lab import Lab, produce, RETRY, PARTITIONS
from laneway.ops.broker import LocalBroker
case = sys.argv[1]
opts = {"none": {}, "poison": {"poison": 0.005}, "once": {"fail_once": 0.03}}[case]
n = 240_000
with LocalBroker.create() as broker:
    tmp = Path(tempfile.mkdtemp())
    lab = Lab(broker.bootstrap, [("x", os.getcwd())], tmp)
    topic = lab.topic("prof")
    produce(lab.bootstrap, topic, n)
    ends = lab.kafka.end_offsets(topic, PARTITIONS)
    for i in range(int(sys.argv[2]) if len(sys.argv) > 2 else 1):
        dlq = lab.dlq(topic)
        spec = lab.spec(topic, n, retry=RETRY, end_offsets=ends, dead_letter_topic=dlq, **opts)
        run = tmp / f"r{i}"; run.mkdir()
        (run / "spec.json").write_text(json.dumps(spec))
        cmd = [sys.executable, "-m", "bench.child", str(run / "spec.json"), str(run / "result.json")]
        if os.environ.get("PROF"):
            cmd = ["/work/main/.venv/bin/py-spy", "record", "-r", "200", "-f", "raw", "-o", os.environ["PROF"] + f".{i}", "--threads", "--"] + cmd
        subprocess.run(cmd, env={**os.environ, "PYTHONPATH": str(lab.paths["x"])}, stdout=subprocess.DEVNULL)
        r = json.loads((run / "result.json").read_text())
        print(case, r["count"], round(r["count"] / r["window_s"]), {k: v for k, v in r.items() if k not in ("seqs", "per_key", "offsets")})
