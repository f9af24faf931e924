import tempfile, sys
from pathlib import Path
from bench import workers_costs as wc
if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as tmp:
        for n in (1, 2):
            r = wc.load_count(n, Path(tmp), clients=50, duration=5.0, light_duration=3.0, pings=100)
            L = r["loaded"]; l = r["light"]
            print(n, round(L["msgs_per_s"]), round(L["cpu_us_per_msg"]), round(L["router_cores"], 2), "light p50/p99", l["latency_ms"]["p50"], l["latency_ms"]["p99"], "errors", L["send_errors"], l["send_errors"], flush=True)
