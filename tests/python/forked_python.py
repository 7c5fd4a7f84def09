"""Python processes for the tests, forked from a server that imported torch once, instead of started anew: `Popen` and
`run` take subprocess's arguments and give what subprocess's give.

Why: `import torch` takes 2.4-2.8 CPU-s in every fresh Python process on a 2-core AMD EPYC (2026-11-30), and the
suite starts dozens of them (the training processes its tests signal, kill and resume, data-parallel ranks, scripts):
minutes of the suite's CPU. A process forked from the server starts with torch imported and nothing else of the
suite's (gpucore, the test modules, the conftest's stand-ins are imported by it as by a fresh process).

What a forked process has as a fresh `python ...` would: its argv and `__main__` (a script, `-m module` or `-c code`),
sys.path (from the script's folder, PYTHONPATH and the current folder), the environment, the current folder,
stdin/stdout/stderr, its session (start_new_session), its exit status (a signal's too), torch's thread count
(OMP_NUM_THREADS), fresh seeds for Python's and numpy's global random generators, and default signal handling.
What was read as the server and torch loaded is the command's own: each command forks from a server started with
its values of everything read at a process' or a library's start (LOADED_AT_START: ATEN_CPU_CAPABILITY,
OMP_WAIT_POLICY, LD_PRELOAD, GLIBC_TUNABLES, PYTHON* settings, the locale ...), one server per such environment, up to
_Server.MAX_SERVERS. A command beyond those, one that is not `sys.executable` with a script, -m or -c, and every
command where fork is not available start as plain processes (subprocess's own start). Python's string hash seed
is the server's in every forked process, where fresh processes draw their own: a test whose processes must differ
there (a data-parallel job's ranks in a real launch) starts them with subprocess. `ps` (/proc/PID/cmdline,
sys.orig_argv) shows a forked process under the server's command line.

A test of what a process does at its start (imports, version checks, malloc settings) uses subprocess itself.
"""
import inspect
import json
import os
import socket
import struct
import subprocess
import sys
import threading

# Environment variables read once as a process or its libraries start: a command whose value differs from the
# server's cannot be forked from it. OMP_NUM_THREADS (torch's thread count, set in the forked process) and PYTHONPATH
# (sys.path, built for the forked process) are applied. TORCHINDUCTOR_*, TORCHDYNAMO_* and TORCHELASTIC_* are not
# here: `import torch` does not import inductor or dynamo, and torchrun reads its own as it runs (inductor sets
# TORCHINDUCTOR_CACHE_DIR in a process that compiled).
LOADED_AT_START = ("PYTHON", "LD_", "GLIBC_", "MALLOC_", "ATEN_", "TORCH_", "PYTORCH_", "OMP_", "GOMP_", "KMP_", "MKL",
                   "OPENBLAS", "CUDA", "NVIDIA", "LANG", "LC_")
APPLIED = ("OMP_NUM_THREADS", "PYTHONPATH")
_STATUS = struct.Struct("!i")  # a pid, or a wait status


def _loaded_at_start(env):
    return {key: value for key, value in env.items()
            if key.startswith(LOADED_AT_START) and key not in APPLIED}


# ---- the server: a process that imported torch and forks the commands sent to it ------------------------------------

def serve(control_fd, listen_fd):
    """The server's loop (its process runs `forked_python.serve(...)` with -c): returns only in a forked process,
    set up as the command asked, which then runs it (`run_command`). The server ends when `control_fd` reads EOF
    (the pytest process that started it has ended)."""
    import gc
    import selectors
    import signal

    import torch  # what the forked processes would each import: the server's reason to be

    default_threads = torch.get_num_threads()
    base_path = sys.path[1:]  # sys.path[0]: the -c's ''; the server starts without PYTHONPATH (_Server)
    listener = socket.socket(fileno=listen_fd)
    wakeup_read, wakeup_write = os.pipe()
    os.set_blocking(wakeup_write, False)
    signal.set_wakeup_fd(wakeup_write)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # wakes the select below through the wakeup fd
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ, "spawn")
    selector.register(wakeup_read, selectors.EVENT_READ, "reap")
    selector.register(control_fd, selectors.EVENT_READ, "end")
    connections = {}  # pid -> the connection its exit status goes to
    # What the server made is out of the collector's reach in every forked process (as gc.freeze's documentation
    # advises for a server that forks): the collections of a forked process, its exit's too, no longer visit (and so
    # copy, page by page) the memory it shares with the server.
    gc.collect()
    gc.freeze()
    while True:
        for key, _ in selector.select():
            if key.data == "end":
                return None
            if key.data == "reap":
                os.read(wakeup_read, 4096)
                while connections:
                    pid, status = os.waitpid(-1, os.WNOHANG)
                    if pid == 0:
                        break
                    connection = connections.pop(pid)
                    try:
                        connection.sendall(_STATUS.pack(status))
                    except OSError:  # its Popen is gone without waiting: nobody to tell
                        pass
                    connection.close()
                continue
            connection, _ = listener.accept()
            command, fds = _request(connection)
            if command is None:
                connection.close()
                continue
            pid = os.fork()
            if pid == 0:  # the forked process: nothing of the server's stays open
                selector.close()
                listener.close()
                for other in connections.values():
                    other.close()
                connection.close()
                for fd in (wakeup_read, wakeup_write, control_fd):
                    os.close(fd)
                signal.set_wakeup_fd(-1)
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                _set_up(command, fds, default_threads, base_path)
                return command
            for fd in fds:
                os.close(fd)
            connections[pid] = connection
            try:
                connection.sendall(_STATUS.pack(pid))
            except OSError:
                pass


def _request(connection):
    """The command a client sent and the stdio file descriptors that came with it; (None, []) where the client went
    away before it had sent it all (its Popen interrupted): the server goes on serving the others."""
    header, fds, _, _ = socket.recv_fds(connection, 8, 3)
    size = struct.unpack("!q", header)[0] if len(header) == 8 else -1
    body = bytearray()
    while 0 <= len(body) < size:
        part = connection.recv(size - len(body))
        if not part:
            break
        body += part
    if len(body) != size:
        for fd in fds:
            os.close(fd)
        return None, []
    return json.loads(body), fds


def _set_up(command, fds, default_threads, base_path):
    """The forked process made what `command` asks of a fresh one: session, stdio, folder, environment, threads,
    random seeds, sys.argv and sys.path (base_path: the server's, started without PYTHONPATH, without its first
    entry)."""
    import torch

    if command["new_session"]:
        os.setsid()
    elif command["process_group"] >= 0:
        os.setpgid(0, command["process_group"])
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
    for fd in set(fds):
        if fd > 2:
            os.close(fd)
    os.chdir(command["cwd"])
    os.environ.clear()
    os.environ.update(command["env"])
    threads = command["env"].get("OMP_NUM_THREADS")
    torch.set_num_threads(int(threads) if threads else default_threads)
    if "numpy" in sys.modules:  # Python's random module reseeds itself in a forked process (os.register_at_fork)
        sys.modules["numpy"].random.seed()
    sys.argv = list(command["argv"])
    pythonpath = command["env"].get("PYTHONPATH", "")
    entries = [os.path.abspath(entry) for entry in pythonpath.split(os.pathsep)] if pythonpath else []
    path, seen = [], set()
    for entry in entries + base_path:  # site.removeduppaths: each folder once, the first place kept
        if os.path.normcase(entry) not in seen:
            seen.add(os.path.normcase(entry))
            path.append(entry)
    sys.path[:] = [command["path0"], *path]


def run_command(command):
    """Runs the command in this (forked) process's __main__, as `python SCRIPT`, `python -m MODULE` or
    `python -c CODE` would; what it raises (SystemExit, KeyboardInterrupt, an error) ends the process as there."""
    import builtins
    import importlib.machinery
    import runpy

    main = sys.modules["__main__"]
    main.__dict__.clear()
    main.__dict__.update(__name__="__main__", __doc__=None, __package__=None, __spec__=None, __builtins__=builtins)
    if command["kind"] == "module":
        runpy._run_module_as_main(command["target"], alter_argv=True)  # what `python -m` runs
        return
    if command["kind"] == "code":
        main.__dict__["__loader__"] = importlib.machinery.BuiltinImporter
        exec(compile(command["target"], "<string>", "exec"), main.__dict__)
        return
    path = command["target"]
    main.__dict__.update(__file__=path, __cached__=None,
                         __loader__=importlib.machinery.SourceFileLoader("__main__", path))
    with open(path, "rb") as source:
        code = compile(source.read(), path, "exec")
    exec(code, main.__dict__)


# ---- the tests' side ---------------------------------------------------------------------------------------------

class _Server:
    """A server process this pytest process started, for the commands whose environment's LOADED_AT_START part is
    its own: one per such environment (libraries this process imports add some: OpenCV LD_LIBRARY_PATH and KMP_*),
    up to MAX_SERVERS; each started at the first command that needs it, and its address."""

    MAX_SERVERS = 4
    _lock = threading.Lock()
    _started = {}  # the LOADED_AT_START part of the environment, as sorted items -> its server

    def __init__(self, env):
        # Without what each command applies for itself: a PYTHONPATH naming site-packages would otherwise drop it from
        # the base path of every later command (test_messages' runs name the installed gpucore's folder).
        self.env = {key: value for key, value in env.items() if key not in APPLIED}
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(f"\0gpucore-tests-fork-{os.getpid()}-{id(self)}")  # Linux's abstract names: no file
        self.listener.listen(64)
        self.address = self.listener.getsockname()
        control_read, self.control = os.pipe()
        boot = (f"import sys; sys.path.insert(0, {os.path.dirname(os.path.abspath(__file__))!r}); "
                f"import forked_python; sys.path.pop(0); "
                f"command = forked_python.serve({control_read}, {self.listener.fileno()}); "
                f"command is not None and forked_python.run_command(command)")
        self.process = subprocess.Popen([sys.executable, "-c", boot], pass_fds=(control_read, self.listener.fileno()),
                                        env=self.env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
        os.close(control_read)
        self.listener.close()  # the server's copy listens: with this one closed, a dead server refuses at once

    @classmethod
    def get(cls, env):
        """The server for a command with environment `env`; None where MAX_SERVERS run already for others."""
        key = tuple(sorted(_loaded_at_start(env).items()))
        with cls._lock:
            server = cls._started.get(key)
            if server is not None and server.process.poll() is None:
                return server
            if server is None and len(cls._started) >= cls.MAX_SERVERS:
                return None
            cls._started[key] = cls(env)
            return cls._started[key]

    def spawn(self, command, fds):
        """The forked process's pid and the connection its exit status will come on."""
        connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        connection.connect(self.address)
        body = json.dumps(command).encode()
        socket.send_fds(connection, [struct.pack("!q", len(body))], fds)
        connection.sendall(body)
        (pid,) = _STATUS.unpack(connection.recv(_STATUS.size, socket.MSG_WAITALL))
        return pid, connection


def _command(args, executable, preexec_fn, pass_fds, cwd, env, shell, gid, gids, uid, umask):
    """What the forked process runs, or None where the command cannot be forked as it would start."""
    if not hasattr(os, "fork") or not sys.platform.startswith("linux") or shell or executable is not None \
            or preexec_fn is not None or pass_fds or gid is not None or gids is not None or uid is not None \
            or umask >= 0 or isinstance(args, (str, bytes, os.PathLike)):
        return None
    args = [os.fspath(arg) for arg in args]
    if len(args) < 2 or args[0] != sys.executable or any(isinstance(arg, bytes) for arg in args):
        return None
    env = dict(os.environ if env is None else env)
    cwd = os.path.abspath(os.fspath(cwd)) if cwd is not None else os.getcwd()
    threads = env.get("OMP_NUM_THREADS")
    if not os.path.isdir(cwd) or (threads is not None and not (threads.isdigit() and int(threads) >= 1)):
        return None
    if args[1] in ("-m", "-c") and len(args) >= 3:
        kind = "module" if args[1] == "-m" else "code"
        argv = ["-m" if kind == "module" else "-c", *args[3:]]  # -m: runpy puts the module's path first
        path0 = cwd if kind == "module" else ""
        return dict(kind=kind, target=args[2], argv=argv, path0=path0, cwd=cwd, env=env)
    if args[1].startswith("-"):
        return None
    script = os.path.join(cwd, args[1])
    if not os.path.isfile(script):
        return None  # python's own error
    return dict(kind="script", target=os.path.abspath(script), argv=args[1:],
                path0=os.path.dirname(os.path.realpath(script)), cwd=cwd, env=env)


_EXECUTE_CHILD = list(inspect.signature(subprocess.Popen._execute_child).parameters)[1:]


class Popen(subprocess.Popen):
    """subprocess.Popen whose Python commands are forked from the server (see the module): the same arguments,
    attributes and methods (pid, returncode, poll, wait, communicate, send_signal, kill, as a context manager)."""

    _connection = None

    def _execute_child(self, *arguments):
        named = dict(zip(_EXECUTE_CHILD, arguments))
        command = _command(*(named[key] for key in ("args", "executable", "preexec_fn", "pass_fds", "cwd", "env",
                                                    "shell", "gid", "gids", "uid", "umask")))
        if command is None:
            return super()._execute_child(*arguments)
        server = _Server.get(command["env"])
        if server is None:
            return super()._execute_child(*arguments)
        command.update(new_session=bool(named["start_new_session"]), process_group=named.get("process_group", -1))
        own = [named["p2cread"], named["c2pwrite"], named["errwrite"]]
        fds = [fd if fd != -1 else standard for fd, standard in zip(own, (0, 1, 2))]
        self.pid, self._connection = server.spawn(command, fds)
        self._child_created = True
        self._close_pipe_fds(named["p2cread"], named["p2cwrite"], named["c2pread"], named["c2pwrite"],
                             named["errread"], named["errwrite"])

    def _server_waitpid(self, pid, flags):
        """os.waitpid for a forked process: its status from the server's message ((0, 0) while it runs)."""
        self._connection.setblocking(not flags & os.WNOHANG)
        try:
            data = self._connection.recv(_STATUS.size, socket.MSG_WAITALL)
        except BlockingIOError:
            return 0, 0
        if len(data) < _STATUS.size:
            raise ChildProcessError(f"the fork server ended before process {pid}'s status came")
        self._connection.close()
        return pid, _STATUS.unpack(data)[0]

    def _internal_poll(self, _deadstate=None, **kwargs):
        if self._connection is None:
            return super()._internal_poll(_deadstate, **kwargs)
        return super()._internal_poll(_deadstate, _waitpid=self._server_waitpid)

    def _try_wait(self, wait_flags):
        if self._connection is None:
            return super()._try_wait(wait_flags)
        # A server gone before the status came raises (subprocess would make the status 0: a test could pass on it).
        return self._server_waitpid(self.pid, wait_flags)


def run(args, *, input=None, capture_output=False, timeout=None, check=False, **kwargs):
    """subprocess.run with this module's Popen."""
    if capture_output:
        kwargs.update(stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if input is not None:
        kwargs["stdin"] = subprocess.PIPE
    with Popen(args, **kwargs) as process:
        try:
            stdout, stderr = process.communicate(input, timeout=timeout)
        except subprocess.TimeoutExpired as expired:
            process.kill()
            expired.output, expired.stderr = process.communicate()
            raise
    done = subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)
    if check:
        done.check_returncode()
    return done
