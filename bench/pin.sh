# Sourced by the bench scripts: with PIN=1 in the environment, PIN_SERVER and PIN_CLIENT are
# the commands that run a server on CPU 0 and a client on CPU 1 (taskset), else empty. Used as
# ${PIN_SERVER[@]+"${PIN_SERVER[@]}"} in front of a command.
PIN_SERVER=()
PIN_CLIENT=()
if [[ -n "${PIN:-}" ]]; then
    if command -v taskset >/dev/null && [[ $(nproc) -ge 2 ]]; then
        PIN_SERVER=(taskset -c 0)
        PIN_CLIENT=(taskset -c 1)
        echo "(pinned: servers on CPU 0, clients on CPU 1)"
    else
        echo "PIN=1 ignored: needs taskset and two CPUs"
    fi
fi
