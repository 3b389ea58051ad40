//! `softib status`: two devices opened on one address (by this test process, as two processes
//! would) are shown as the two live members of one host-wide device, with their QPs; a member
//! that is dropped is shown as left with `--all`, and the device disappears with the last.

mod procs;

use procs::softib;
use softib_udp::{Device, DeviceConfig};

fn status_json() -> Vec<serde_json::Value> {
    let out = softib()
        .args(["status", "--json", "--all"])
        .output()
        .unwrap();
    assert!(out.status.success());
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn device(at: &str) -> Option<serde_json::Value> {
    status_json().into_iter().find(|d| d["address"] == at)
}

#[test]
fn status_lists_the_members_of_a_host_wide_device() {
    let at = "127.0.31.1:4791";
    let a = Device::open(&DeviceConfig::new(at.parse().unwrap())).unwrap();
    let mut b = Device::open(&DeviceConfig::new(at.parse().unwrap())).unwrap();
    let pd = b.hca_mut().alloc_pd().unwrap();
    let cq = b.hca_mut().create_cq(16).unwrap();
    let cap = softib_core::verbs::qp::QpCap {
        max_send_wr: 4,
        max_recv_wr: 4,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    let init =
        softib_core::verbs::qp::QpInitAttr::new(softib_core::verbs::types::QpType::Rc, cq, cap);
    for _ in 0..3 {
        b.hca_mut().create_qp(pd, &init).unwrap();
    }
    // The counters reach the table in the devices' rounds.
    for _ in 0..3 {
        b.poll_io().unwrap();
        std::thread::sleep(std::time::Duration::from_millis(110));
        b.poll_io().unwrap();
    }
    let d = device(at).expect("the device is listed");
    assert_eq!(d["sockets"], 2, "{d}");
    let members = d["members"].as_array().unwrap();
    let me = std::process::id();
    let slot = |dev: &Device| u64::from(dev.member_slot().unwrap());
    for (dev, qps) in [(&a, 0), (&b, 3)] {
        let m = members
            .iter()
            .find(|m| m["slot"] == slot(dev))
            .unwrap_or_else(|| panic!("{d}"));
        assert_eq!(m["pid"], me);
        assert_eq!(m["live"], true);
        if qps > 0 {
            assert_eq!(m["counters"]["qps"], qps, "{d}");
        }
    }
    let sb = slot(&b);
    drop(b);
    let d = device(at).expect("the device is listed");
    let left = d["members"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["slot"] == sb)
        .cloned()
        .unwrap();
    assert_eq!(left["live"], false, "{d}");
    // The table's text form names the address and the live member.
    let out = softib().arg("status").output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("device 127.0.31.1:4791: 1 process,"),
        "{text}"
    );
    drop(a);
    assert!(device(at).is_none(), "the last member removes the device");
}
