# Sourced by the scripts that run softib on two hosts (scripts/host-wide.sh, mpi.sh,
# libfabric.sh): two network namespaces joined by a veth pair, each with one address. Needs
# root and ip(8).
#
#   two_hosts_up NS_A NS_B IP_A IP_B   makes them, after removing what a killed run left;
#                                      fails if the kernel refuses
#   hosts_down NS...                   kills what runs in each namespace, removes the files
#                                      softib left in its /dev/shm (a failed case reports
#                                      them first; files named after a deleted namespace
#                                      would stay for good), deletes it
#   wait_port NS PORT                  waits until a TCP port of namespace NS listens (at
#                                      most 10 s)

two_hosts_up() {
    local a=$1 b=$2 ipa=$3 ipb=$4
    hosts_down "$a" "$b"
    ip netns add "$a" && ip netns add "$b" &&
        ip link add "$a-v" type veth peer name "$b-v" &&
        ip link set "$a-v" netns "$a" && ip link set "$b-v" netns "$b" &&
        ip -n "$a" addr add "$ipa/24" dev "$a-v" &&
        ip -n "$b" addr add "$ipb/24" dev "$b-v" &&
        ip -n "$a" link set lo up && ip -n "$b" link set lo up &&
        ip -n "$a" link set "$a-v" up && ip -n "$b" link set "$b-v" up
}

hosts_down() {
    local ns
    for ns in "$@"; do
        ip netns pids "$ns" 2>/dev/null | xargs -r kill -9 2>/dev/null
        ip netns exec "$ns" sh -c 'rm -f /dev/shm/softib-$(stat -L -c %i /proc/self/ns/net)-*' \
            2>/dev/null
        ip netns del "$ns" 2>/dev/null
    done
    return 0
}

wait_port() {
    for _ in $(seq 1 200); do
        ip netns exec "$1" ss -ltn 2>/dev/null | grep -q ":$2 " && return 0
        sleep 0.05
    done
    return 1
}
