"""Parsl apps declared the way users declare them (decorators), for the executor tests.

Decorated, so the module attribute is Parsl's app object and pickle cannot send the function
by reference: the executor must send it as Parsl does (dill)."""

import sys

from parsl import bash_app, join_app, python_app


@python_app(executors=["xbucket"])
def square(x: int) -> int:
    return x * x


@python_app(executors=["xbucket"])
def total(*values: int, inputs=()) -> int:
    return sum(values) + sum(inputs)


@python_app(executors=["xbucket"])
def refuse(x: int) -> int:
    raise ValueError(f"refused {x}")


@bash_app(executors=["xbucket"])
def echo(text: str, stdout=None, stderr=None) -> str:
    return f"echo {text}"


@bash_app(executors=["xbucket"])
def exit_with(code: int) -> str:
    return f"exit {code}"


@bash_app(executors=["xbucket"])
def hog(megabytes: int, stdout=None) -> str:
    """A bash command whose child (not bash itself) holds ``megabytes`` MB."""
    code = f"import time; b = b'x' * ({megabytes} * 2**20); time.sleep(0.3); print(len(b) >> 20)"
    return f'{sys.executable} -c "{code}"'


@join_app
def squares_then_total(n: int):
    return total(*[square(i) for i in range(n)])


@python_app(executors=["xbucket"])
def nap(seconds: float, pid_file: str = "", walltime: float = 60) -> float:
    """Sleeps in a child process (``sleep``), so a walltime kill must reach the grandchild."""
    import os
    import subprocess

    child = subprocess.Popen(["sleep", str(seconds)])
    if pid_file:
        with open(pid_file, "w") as handle:
            handle.write(f"{os.getpid()} {child.pid}")
    child.wait()
    return seconds


@bash_app(executors=["xbucket"])
def bash_nap(seconds: float, pid_file: str, walltime: float = 60) -> str:
    return f"echo $$ > {pid_file}; sleep {seconds}"
