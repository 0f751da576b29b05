"""A STAND-IN for the ``appworld`` package, used by tests and demos because AppWorld's task data cannot be
downloaded here. It mimics the small API surface the bridge uses (``load_task_ids``, ``AppWorld(task_id,
experiment_name)`` with ``task.instruction`` / ``task.supervisor``, ``execute(code) -> str``,
``task_completed()``, ``evaluate()`` with ``success`` / ``pass_percentage`` / ``num_tests``, ``close()``)
over three toy apps (a music library, a todo list, a wallet). Nothing here is AppWorld's data or code.

Code runs in a namespace that holds ``apis`` (``apis.<app>.<api>(**kwargs)``) and a small set of builtins
(:data:`_BUILTINS`: no ``import``, ``open``, ``eval``, ``exec``); the agent ends the task with
``apis.supervisor.complete_task(answer=...)``. The reduced builtins keep honest mistakes away from the machine;
they are not a security boundary (Python code can reach other objects through attributes). The time limit,
process group and reduced environment variables come from the bridge process (env.py). Also exposes ``task.standin_solution`` so the
bridge can offer an expert.
"""

import builtins
import contextlib
import io
import random
import types

_BUILTINS = {name: getattr(builtins, name) for name in (
    "abs", "all", "any", "bool", "dict", "divmod", "enumerate", "filter", "float", "int", "isinstance", "len",
    "list", "map", "max", "min", "print", "range", "repr", "reversed", "round", "set", "sorted", "str", "sum",
    "tuple", "zip", "True", "False", "None", "Exception", "ValueError", "KeyError", "TypeError", "IndexError",
    "ZeroDivisionError", "AttributeError", "NameError",
)}

_TASKS = {
    "train": ["music_count", "todo_add", "wallet_total", "music_longest"],
    "dev": ["music_count_dev", "wallet_total_dev"],
    "test_normal": ["todo_add_test"],
}


def load_task_ids(dataset_name):
    if dataset_name not in _TASKS:
        raise ValueError(f"unknown dataset {dataset_name!r}; known: {sorted(_TASKS)}")
    return list(_TASKS[dataset_name])


class _Supervisor:
    first_name, last_name, email = "Alex", "Doe", "alex.doe@example.com"


def _world_state(task_id):
    rng = random.Random(task_id)
    songs = [{"title": f"Song {k}", "seconds": rng.randint(120, 360)} for k in range(rng.randint(4, 9))]
    todos = [f"chore {k}" for k in range(rng.randint(1, 4))]
    payments = [round(rng.uniform(5, 80), 2) for _ in range(rng.randint(3, 6))]
    return {"songs": songs, "todos": todos, "payments": payments, "answer": None, "completed": False}


_SPECS = {
    "music_count": ("How many songs are in my music library? Answer with the number.",
                    lambda s: len(s["songs"]), "print(len(apis.music.list_songs()))\napis.supervisor.complete_task(answer=len(apis.music.list_songs()))"),
    "music_longest": ("What is the title of the longest song in my music library?",
                      lambda s: max(s["songs"], key=lambda x: x["seconds"])["title"],
                      "songs = apis.music.list_songs()\napis.supervisor.complete_task(answer=max(songs, key=lambda s: s['seconds'])['title'])"),
    "todo_add": ("Add 'buy milk' to my todo list, then complete the task.", None,
                 "apis.todo.add_item(text='buy milk')\napis.supervisor.complete_task()"),
    "wallet_total": ("What is the total of all payments in my wallet, rounded to 2 decimals?",
                     lambda s: round(sum(s["payments"]), 2),
                     "apis.supervisor.complete_task(answer=round(sum(apis.wallet.list_payments()), 2))"),
}
_SPECS["music_count_dev"] = _SPECS["music_count"]
_SPECS["wallet_total_dev"] = _SPECS["wallet_total"]
_SPECS["todo_add_test"] = _SPECS["todo_add"]


class _Evaluation:
    def __init__(self, passed, total):
        self.num_tests = total
        self.pass_percentage = 100.0 * passed / total
        self.success = passed == total

    def to_dict(self):
        return {"success": self.success, "pass_percentage": self.pass_percentage, "num_tests": self.num_tests}


class AppWorld:
    def __init__(self, task_id, experiment_name="default"):
        if task_id not in _SPECS:
            raise ValueError(f"unknown task id {task_id!r}")
        instruction, expected, solution = _SPECS[task_id]
        self.task_id = task_id
        self._expected = expected
        self._state = _world_state(task_id)
        self._initial_todos = list(self._state["todos"])
        self.task = types.SimpleNamespace(instruction=instruction, supervisor=_Supervisor(), standin_solution=solution)
        state = self._state
        self._apis = types.SimpleNamespace(
            music=types.SimpleNamespace(list_songs=lambda: [dict(s) for s in state["songs"]]),
            todo=types.SimpleNamespace(list_items=lambda: list(state["todos"]), add_item=lambda text: state["todos"].append(str(text))),
            wallet=types.SimpleNamespace(list_payments=lambda: list(state["payments"])),
            supervisor=types.SimpleNamespace(complete_task=self._complete),
        )

    def _complete(self, answer=None):
        self._state["answer"] = answer
        self._state["completed"] = True

    def execute(self, code):
        buffer = io.StringIO()
        try:
            with contextlib.redirect_stdout(buffer):
                exec(compile(code, "<agent>", "exec"), {"apis": self._apis, "__builtins__": dict(_BUILTINS)})
        except Exception as exc:
            return buffer.getvalue() + f"Execution failed. {type(exc).__name__}: {exc}"
        return buffer.getvalue() or "Execution successful."

    def task_completed(self):
        return self._state["completed"]

    def evaluate(self):
        if self._expected is None:  # the todo task: the item was added and nothing else changed
            added = self._state["todos"][len(self._initial_todos):]
            checks = [added == ["buy milk"], self._state["todos"][: len(self._initial_todos)] == self._initial_todos]
        else:
            checks = [self._state["completed"], str(self._state["answer"]) == str(self._expected(self._state))]
        return _Evaluation(sum(checks), len(checks))

    def close(self):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
