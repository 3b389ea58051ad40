//! Which softib devices a process sees, and where each one binds.
//!
//! In order of precedence:
//! 1. `SOFTIB_BIND=IP[:PORT][,IP[:PORT]...]`: one device per address (`softib0`, `softib1`, ...).
//! 2. A config file, `$SOFTIB_CONFIG` or else `$XDG_CONFIG_HOME/softib/devices.conf`
//!    (`~/.config/softib/devices.conf`): one device per line, `NAME IP[:PORT]` or `NAME auto`;
//!    `#` starts a comment.
//! 3. Nothing configured: one device, `softib0`, on the first free loopback address.
//!
//! Device `i` of the list is the uverbs device `uverbs<i>`. Two libraries read the list:
//! softib's `libibverbs.so.1` (crates/softib-verbs), which opens the devices, and the preload
//! library of `softib run` (crates/softib-preload), which shows them where middleware looks
//! for them (`/dev/infiniband`, `/sys/class/infiniband`). Both read it from here, so they agree.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;

use softib_wire::udp::ROCEV2_PORT;

/// Longest device name (bytes), as rdma-core's `IBV_SYSFS_NAME_MAX` (64) with its NUL.
pub const MAX_NAME_LEN: usize = 63;

/// One configured device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceSpec {
    /// Device name (`softib0`).
    pub name: String,
    /// Where it binds; `None` for the first free loopback address.
    pub bind: Option<SocketAddr>,
}

/// Parses `IP`, `IP:PORT`, `[IPv6]:PORT` (port 4791 when absent).
pub fn parse_bind(s: &str) -> Option<SocketAddr> {
    let s = s.trim();
    if let Ok(a) = s.parse::<SocketAddr>() {
        return Some(a);
    }
    s.parse::<IpAddr>()
        .ok()
        .map(|ip| SocketAddr::new(ip, ROCEV2_PORT))
}

/// The devices of this process, from the environment or the config file.
pub fn devices() -> Vec<DeviceSpec> {
    let bind = std::env::var("SOFTIB_BIND").ok();
    let file = || {
        config_path()
            .and_then(|p| std::fs::read_to_string(p).ok())
            .unwrap_or_default()
    };
    devices_from(bind.as_deref(), file)
}

/// [`devices`] from the value of `SOFTIB_BIND` and the config file's text (read only when
/// `SOFTIB_BIND` names no device).
pub fn devices_from(bind: Option<&str>, config_text: impl FnOnce() -> String) -> Vec<DeviceSpec> {
    if let Some(v) = bind {
        let specs: Vec<DeviceSpec> = v
            .split(',')
            .filter(|s| !s.trim().is_empty())
            .enumerate()
            .map(|(i, s)| DeviceSpec {
                name: format!("softib{i}"),
                bind: if s.trim() == "auto" {
                    None
                } else {
                    parse_bind(s)
                },
            })
            .collect();
        if !specs.is_empty() {
            return specs;
        }
    }
    let specs = parse_config(&config_text());
    if !specs.is_empty() {
        return specs;
    }
    vec![DeviceSpec {
        name: "softib0".into(),
        bind: None,
    }]
}

fn config_path() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("SOFTIB_CONFIG") {
        return Some(PathBuf::from(p));
    }
    let base = std::env::var_os("XDG_CONFIG_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".config")))?;
    Some(base.join("softib").join("devices.conf"))
}

/// Parses a config file: `NAME IP[:PORT]` or `NAME auto` per line. Lines that do not parse are
/// skipped (a warning would go to a program's stderr, which is not ours to write), and so are
/// names longer than [`MAX_NAME_LEN`], names with a `/` and names already listed.
pub fn parse_config(text: &str) -> Vec<DeviceSpec> {
    let mut out = Vec::new();
    for line in text.lines() {
        let line = line.split('#').next().unwrap_or("").trim();
        let mut it = line.split_whitespace();
        let (Some(name), Some(bind)) = (it.next(), it.next()) else {
            continue;
        };
        if name.len() > MAX_NAME_LEN
            || name.contains('/')
            || name == "."
            || name == ".."
            || out.iter().any(|d: &DeviceSpec| d.name == name)
        {
            continue;
        }
        let bind = if bind == "auto" {
            None
        } else {
            match parse_bind(bind) {
                Some(b) => Some(b),
                None => continue,
            }
        };
        out.push(DeviceSpec {
            name: name.to_string(),
            bind,
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_file_lines() {
        let d = parse_config(
            "# devices\nsoftib0 127.0.0.9\nrdma1 10.0.0.1:5000 # real NIC\nbad\nx auto\nsoftib0 1.2.3.4\nq nonsense\na/b auto\n.. auto\n",
        );
        assert_eq!(
            d,
            vec![
                DeviceSpec {
                    name: "softib0".into(),
                    bind: Some("127.0.0.9:4791".parse().unwrap())
                },
                DeviceSpec {
                    name: "rdma1".into(),
                    bind: Some("10.0.0.1:5000".parse().unwrap())
                },
                DeviceSpec {
                    name: "x".into(),
                    bind: None
                },
            ]
        );
    }

    #[test]
    fn long_names_are_skipped() {
        let ok = "n".repeat(MAX_NAME_LEN);
        let long = "n".repeat(MAX_NAME_LEN + 1);
        let d = parse_config(&format!("{long} auto\n{ok} auto\n"));
        assert_eq!(d.len(), 1);
        assert_eq!(d[0].name, ok);
    }

    #[test]
    fn precedence() {
        let never = || -> String { panic!("the file is not read when SOFTIB_BIND names devices") };
        let d = devices_from(Some("127.0.0.3, auto"), never);
        assert_eq!(
            d,
            vec![
                DeviceSpec {
                    name: "softib0".into(),
                    bind: Some("127.0.0.3:4791".parse().unwrap())
                },
                DeviceSpec {
                    name: "softib1".into(),
                    bind: None
                },
            ]
        );
        let d = devices_from(Some(" , "), || "mine auto\n".into());
        assert_eq!(d[0].name, "mine");
        let d = devices_from(None, String::new);
        assert_eq!(
            d,
            vec![DeviceSpec {
                name: "softib0".into(),
                bind: None
            }]
        );
    }

    #[test]
    fn bind_forms() {
        assert_eq!(
            parse_bind("127.0.0.2"),
            Some("127.0.0.2:4791".parse().unwrap())
        );
        assert_eq!(
            parse_bind("[::1]:7"),
            Some("[::1]:7".parse::<SocketAddr>().unwrap())
        );
        assert_eq!(
            parse_bind("::1"),
            Some("[::1]:4791".parse::<SocketAddr>().unwrap())
        );
        assert_eq!(parse_bind("nope"), None);
    }
}
