"""Cluster environments: detection, rank reading, validation and SLURM host lists."""

from __future__ import annotations

import signal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from interlock.plugins.environments import (
    EnvVarEnvironment,
    LocalEnvironment,
    SLURMEnvironment,
    TorchElasticEnvironment,
    detect_environment,
    expand_nodelist,
    first_host,
)

TORCHRUN = {
    "TORCHELASTIC_RUN_ID": "abc",
    "RANK": "5",
    "WORLD_SIZE": "8",
    "LOCAL_RANK": "1",
    "LOCAL_WORLD_SIZE": "4",
    "GROUP_RANK": "1",
    "MASTER_ADDR": "10.0.0.1",
    "MASTER_PORT": "29500",
}
SLURM = {
    "SLURM_NTASKS": "4",
    "SLURM_PROCID": "3",
    "SLURM_LOCALID": "1",
    "SLURM_NODEID": "1",
    "SLURM_NNODES": "2",
    "SLURM_NODELIST": "gpu[07-08]",
    "SLURM_JOB_ID": "123456",
    "SLURM_JOB_NAME": "train",
}
PLAIN = {"MASTER_ADDR": "host", "MASTER_PORT": "1234", "RANK": "1", "WORLD_SIZE": "2"}


def _facts(env):
    return (
        env.world_size(),
        env.global_rank(),
        env.local_rank(),
        env.node_rank(),
        env.main_address(),
        env.main_port(),
    )


def test_torchelastic_reads_torchrun_variables():
    """torchrun's variables give ranks, node rank from GROUP_RANK, and the rendezvous address."""
    env = detect_environment(TORCHRUN)
    assert isinstance(env, TorchElasticEnvironment)
    assert env.creates_processes_externally
    assert _facts(env) == (8, 5, 1, 1, "10.0.0.1", 29500)


def test_torchelastic_falls_back_to_node_rank():
    """Without GROUP_RANK the node rank comes from NODE_RANK, else 0."""
    env = {k: v for k, v in TORCHRUN.items() if k != "GROUP_RANK"}
    assert TorchElasticEnvironment({**env, "NODE_RANK": "3"}).node_rank() == 3
    assert TorchElasticEnvironment(env).node_rank() == 0


def test_slurm_reads_slurm_variables_and_derives_address_and_port():
    """SLURM gives ranks; the address is the first node and the port comes from the job id."""
    env = detect_environment(SLURM)
    assert isinstance(env, SLURMEnvironment)
    assert _facts(env) == (4, 3, 1, 1, "gpu07", 10000 + 123456 % 20000)
    assert env.requeue_signal == signal.SIGUSR1


def test_slurm_respects_master_addr_and_port():
    """MASTER_ADDR / MASTER_PORT override what SLURM would derive."""
    env = SLURMEnvironment({**SLURM, "MASTER_ADDR": "head", "MASTER_PORT": "4000"})
    assert (env.main_address(), env.main_port()) == ("head", 4000)


def test_slurm_uses_job_nodelist_when_nodelist_is_missing():
    """SLURM_JOB_NODELIST is read when SLURM_NODELIST is absent."""
    env = {k: v for k, v in SLURM.items() if k != "SLURM_NODELIST"}
    assert SLURMEnvironment({**env, "SLURM_JOB_NODELIST": "a[3-4]"}).main_address() == "a3"
    with pytest.raises(ValueError, match="SLURM_NODELIST is not set"):
        SLURMEnvironment(env).main_address()


@pytest.mark.parametrize(
    ("job_name", "ntasks", "detected"),
    [("bash", "1", False), ("interactive", "1", False), ("bash", "2", True), ("train", "1", True)],
)
def test_slurm_interactive_single_task_is_not_a_cluster(job_name, ntasks, detected):
    """An interactive one-task allocation is treated as local; batch jobs or several tasks are SLURM."""
    env = {**SLURM, "SLURM_JOB_NAME": job_name, "SLURM_NTASKS": ntasks, "SLURM_PROCID": "0", "SLURM_LOCALID": "0"}
    assert SLURMEnvironment.detect(env) is detected
    assert isinstance(detect_environment(env), SLURMEnvironment if detected else LocalEnvironment)


def test_env_var_environment_defaults_local_rank_to_rank():
    """Plain variables give ranks; LOCAL_RANK defaults to RANK and NODE_RANK to 0."""
    env = detect_environment(PLAIN)
    assert isinstance(env, EnvVarEnvironment)
    assert _facts(env) == (2, 1, 1, 0, "host", 1234)
    assert EnvVarEnvironment({**PLAIN, "LOCAL_RANK": "0", "NODE_RANK": "1"}).local_rank() == 0


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({**SLURM, **TORCHRUN}, TorchElasticEnvironment),
        ({**PLAIN, **SLURM}, SLURMEnvironment),
        (PLAIN, EnvVarEnvironment),
        ({}, LocalEnvironment),
        ({"RANK": "0"}, LocalEnvironment),
    ],
)
def test_detection_order(environ, expected):
    """torchelastic beats SLURM, which beats plain variables, which beat local."""
    assert type(detect_environment(environ)) is expected


def test_detection_reads_os_environ_by_default(monkeypatch):
    """Without an explicit mapping the live process environment is used."""
    for key, value in PLAIN.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("TORCHELASTIC_RUN_ID", raising=False)
    monkeypatch.delenv("SLURM_NTASKS", raising=False)
    env = detect_environment()
    assert isinstance(env, EnvVarEnvironment)
    assert env.global_rank() == 1


@pytest.mark.parametrize(
    ("environ", "message"),
    [
        ({**PLAIN, "RANK": "2"}, "RANK=2 is out of range for WORLD_SIZE=2"),
        ({**PLAIN, "RANK": "one"}, "RANK='one' is not an integer"),
        ({**PLAIN, "WORLD_SIZE": "0"}, "WORLD_SIZE=0 must be at least 1"),
        ({**PLAIN, "RANK": "-1"}, "RANK=-1 is negative"),
        ({**PLAIN, "MASTER_PORT": "70000"}, "MASTER_PORT=70000 is not a TCP port"),
        ({**PLAIN, "MASTER_ADDR": " "}, "MASTER_ADDR=' ' is not a host"),
        ({**TORCHRUN, "LOCAL_RANK": "4"}, "LOCAL_RANK=4 is out of range for LOCAL_WORLD_SIZE=4"),
        ({**SLURM, "SLURM_PROCID": "4"}, "SLURM_PROCID=4 is out of range for SLURM_NTASKS=4"),
        ({**SLURM, "SLURM_NTASKS": "4.0"}, "SLURM_NTASKS='4.0' is not an integer"),
        ({**SLURM, "SLURM_NODEID": "2"}, "SLURM_NODEID=2 is out of range for SLURM_NNODES=2"),
        ({**SLURM, "SLURM_NODELIST": "gpu[07-"}, "SLURM_NODELIST='gpu\\[07-' cannot be parsed"),
        ({**SLURM, "SLURM_JOB_ID": "x"}, "SLURM_JOB_ID='x' is not an integer"),
        ({k: v for k, v in TORCHRUN.items() if k != "MASTER_PORT"}, "MASTER_PORT is not set"),
    ],
)
def test_bad_values_raise_errors_naming_the_variable(environ, message):
    """detect_environment validates eagerly and names the offending variable and value."""
    with pytest.raises(ValueError, match=message):
        detect_environment(environ)


def test_local_environment_defaults_and_set_ranks():
    """Local starts as a single process on 127.0.0.1 and takes ranks from set_ranks."""
    env = LocalEnvironment({})
    assert not env.creates_processes_externally
    assert (env.world_size(), env.global_rank(), env.local_rank(), env.node_rank()) == (1, 0, 0, 0)
    assert env.main_address() == "127.0.0.1"
    port = env.main_port()
    assert 1 <= port <= 65535
    assert env.main_port() == port
    env.set_ranks(4, 3)
    assert (env.world_size(), env.global_rank(), env.local_rank()) == (4, 3, 3)
    env.set_ranks(4, 3, local_rank=1)
    assert env.local_rank() == 1


def test_local_environment_honours_fixed_address_and_port():
    """MASTER_ADDR / MASTER_PORT, when set, replace the local defaults."""
    env = LocalEnvironment({"MASTER_ADDR": "10.1.1.1", "MASTER_PORT": "5555"})
    assert (env.main_address(), env.main_port()) == ("10.1.1.1", 5555)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((0, 0), "world_size=0"),
        ((2, 2), "global_rank=2 is out of range"),
        ((2, 1, -1), "local_rank=-1"),
        ((2.0, 0), "world_size=2.0"),
    ],
)
def test_set_ranks_validates(args, message):
    """set_ranks refuses impossible or non-integer ranks."""
    with pytest.raises(ValueError, match=message):
        LocalEnvironment({}).set_ranks(*args)


# --- SLURM host lists ---------------------------------------------------------------------------------------------

_names = st.text("abcdefghijklmnopqrstuvwxyz0123456789-.", min_size=1, max_size=6)


@st.composite
def _bracket(draw):
    """A bracket body with its expansion, e.g. ('01-03,7', ['01', '02', '03', '7'])."""
    items, expanded = [], []
    for _ in range(draw(st.integers(1, 3))):
        start, length, width = draw(st.integers(0, 120)), draw(st.integers(0, 3)), draw(st.integers(1, 4))
        stop = start + length
        start_s = f"{start:0{width}d}"
        items.append(start_s if length == 0 else f"{start_s}-{stop}")
        expanded.extend(f"{n:0{len(start_s)}d}" for n in range(start, stop + 1))
    return ",".join(items), expanded


@st.composite
def _host_entry(draw):
    """One comma-separated entry of a host list with its expansion."""
    prefix = draw(_names)
    if not draw(st.booleans()):
        return prefix, [prefix]
    body, numbers = draw(_bracket())
    suffix = draw(st.sampled_from(["", "-ib", "x"]))
    return f"{prefix}[{body}]{suffix}", [f"{prefix}{n}{suffix}" for n in numbers]


@given(st.lists(_host_entry(), min_size=1, max_size=4))
def test_nodelists_expand_in_order(entries):
    """A generated SLURM host list expands to exactly its hosts, first host first."""
    nodelist = ",".join(text for text, _ in entries)
    expected = [host for _, hosts in entries for host in hosts]
    assert expand_nodelist(nodelist) == expected
    assert first_host(nodelist) == expected[0]


def test_nodelist_examples():
    """Ranges, singletons, padding and several bracket groups expand as SLURM does."""
    assert expand_nodelist("node[01-03,07]") == ["node01", "node02", "node03", "node07"]
    assert expand_nodelist("n[8-10]") == ["n8", "n9", "n10"]
    assert expand_nodelist("r[1-2]-n[1,3]") == ["r1-n1", "r1-n3", "r2-n1", "r2-n3"]
    assert first_host("login1,node[5-9]") == "login1"


@pytest.mark.parametrize("nodelist", ["", "a,,b", "node[01-03", "node]1[", "n[3-1]", "n[x]", "n[]", "n[[1]]"])
def test_malformed_nodelists_are_refused(nodelist):
    """Broken host lists raise a ValueError naming SLURM_NODELIST and its value."""
    with pytest.raises(ValueError, match="SLURM_NODELIST="):
        expand_nodelist(nodelist)
    with pytest.raises(ValueError, match="SLURM_NODELIST="):
        first_host(nodelist)
