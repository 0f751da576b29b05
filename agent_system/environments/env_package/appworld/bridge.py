"""AppWorld bridge: runs inside AppWorld's OWN interpreter (it pins old pydantic / SQLAlchemy) and serves one
AppWorld task at a time over stdin/stdout, one JSON object per line.

Requests: {"cmd": "reset", "index": int} | {"cmd": "execute", "code": str} | {"cmd": "close"}.
Replies:  {"ok": true, ...} or {"ok": false, "error": str}.
reset -> task_id, instruction, supervisor; execute -> output, completed, and once completed the evaluation
(success, pass_fraction, num_tests). This file imports only the standard library and ``appworld``.
"""

import argparse
import json
import sys
import traceback


def _supervisor_text(task):
    sup = getattr(task, "supervisor", None)
    if sup is None:
        return ""
    if isinstance(sup, dict):
        return ", ".join(f"{k}: {v}" for k, v in sup.items())
    names = [f"{k}: {getattr(sup, k)}" for k in ("first_name", "last_name", "email", "phone_number") if hasattr(sup, k)]
    return ", ".join(names) or str(sup)


def serve(dataset, experiment_name, max_output_chars, stdin, stdout):
    from appworld import AppWorld, load_task_ids

    task_ids = list(load_task_ids(dataset))
    if not task_ids:
        raise SystemExit(f"AppWorld dataset {dataset!r} has no tasks")
    world = None

    def reply(**payload):
        stdout.write(json.dumps(payload) + "\n")
        stdout.flush()

    for line in stdin:
        try:
            req = json.loads(line)
            cmd = req.get("cmd")
            if cmd == "close":
                break
            if cmd == "reset":
                if world is not None:
                    world.close()
                task_id = task_ids[int(req["index"]) % len(task_ids)]
                world = AppWorld(task_id=task_id, experiment_name=experiment_name)
                reply(ok=True, task_id=task_id, instruction=world.task.instruction, supervisor=_supervisor_text(world.task),
                      expert_code=getattr(world.task, "standin_solution", None))
            elif cmd == "execute":
                if world is None:
                    reply(ok=False, error="execute before reset")
                    continue
                output = str(world.execute(req["code"]))[:max_output_chars]
                completed = bool(world.task_completed())
                result = {"ok": True, "output": output, "completed": completed}
                if completed:
                    ev = world.evaluate()
                    result.update(success=bool(ev.success), pass_fraction=float(ev.pass_percentage) / 100.0, num_tests=int(ev.num_tests))
                reply(**result)
            else:
                reply(ok=False, error=f"unknown command {cmd!r}")
        except Exception as exc:  # report, keep serving: one bad request must not end the session
            reply(ok=False, error=f"{type(exc).__name__}: {exc}", trace=traceback.format_exc()[-2000:])
    if world is not None:
        world.close()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--dataset", default="train")
    parser.add_argument("--experiment-name", default="slea_rl")
    parser.add_argument("--max-output-chars", type=int, default=4000)
    args = parser.parse_args()
    serve(args.dataset, args.experiment_name, args.max_output_chars, sys.stdin, sys.stdout)


if __name__ == "__main__":
    main()
