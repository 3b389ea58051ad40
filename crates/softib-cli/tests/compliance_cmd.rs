//! `softib compliance`: the report lists every statement of the spec's compliance table once,
//! in table order, with one of the three statuses, and its totals add up.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::process::{Command, Output};

use serde_json::Value;

const SPEC_TSV: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../../shared/spec/compliance.tsv"
);

fn softib(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_softib"))
        .arg("compliance")
        .args(args)
        .output()
        .expect("run softib")
}

fn stdout_ok(args: &[&str]) -> String {
    let out = softib(args);
    assert!(
        out.status.success(),
        "softib compliance {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("UTF-8 output")
}

fn json(args: &[&str]) -> Vec<Value> {
    let mut all = vec!["--json"];
    all.extend_from_slice(args);
    match serde_json::from_str(&stdout_ok(&all)).expect("valid JSON") {
        Value::Array(items) => items,
        other => panic!("expected a JSON array, got {other}"),
    }
}

fn field<'a>(item: &'a Value, key: &str) -> &'a str {
    item[key]
        .as_str()
        .unwrap_or_else(|| panic!("{key} missing in {item}"))
}

/// (id, status, service) of every statement row of the spec's table, in file order.
fn spec_rows() -> Vec<(String, String, String)> {
    let text = std::fs::read_to_string(SPEC_TSV).expect("read the spec's compliance.tsv");
    text.lines()
        .skip(1)
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let f: Vec<&str> = l.split('\t').collect();
            (f[0].to_owned(), f[1].to_owned(), f[2].to_owned())
        })
        .collect()
}

/// Parses `N statements: C covered, T todo, U untestable`.
fn totals(line: &str) -> [usize; 4] {
    let nums: Vec<usize> = line
        .split(|c: char| !c.is_ascii_digit())
        .filter(|s| !s.is_empty())
        .map(|s| s.parse().unwrap())
        .collect();
    let expected = format!(
        "{} statements: {} covered, {} todo, {} untestable",
        nums[0], nums[1], nums[2], nums[3]
    );
    assert_eq!(line, expected);
    [nums[0], nums[1], nums[2], nums[3]]
}

#[test]
fn json_lists_every_statement_once_in_table_order() {
    let items = json(&[]);
    let spec = spec_rows();
    assert_eq!(spec.len(), 274);
    assert_eq!(items.len(), 274);
    let ids: Vec<&str> = items.iter().map(|i| field(i, "id")).collect();
    let unique: HashSet<&str> = ids.iter().copied().collect();
    assert_eq!(unique.len(), ids.len(), "duplicate ids");
    let spec_ids: Vec<&str> = spec.iter().map(|(id, _, _)| id.as_str()).collect();
    assert_eq!(ids, spec_ids);

    for (item, (id, spec_status, service)) in items.iter().zip(&spec) {
        let status = field(item, "status");
        assert!(
            ["covered", "todo", "untestable"].contains(&status),
            "{id}: status {status}"
        );
        assert_eq!(field(item, "service"), service);
        let tests = item["tests"].as_array().expect("tests array");
        let prefix = format!("{}_", id.to_lowercase().replace(['-', '.'], "_"));
        for t in tests {
            let name = t.as_str().expect("test name");
            assert!(name.starts_with(&prefix), "{id}: test {name}");
        }
        match status {
            "covered" => assert!(!tests.is_empty(), "{id} covered without tests"),
            "todo" => assert!(tests.is_empty(), "{id} todo with tests {tests:?}"),
            _ => {}
        }
        assert_eq!(
            item.get("reason").is_some(),
            status == "untestable",
            "{id}: a reason goes with untestable, and only with it"
        );
        match spec_status.as_str() {
            "obsolete" => {
                assert_eq!(status, "untestable");
                assert_eq!(field(item, "reason"), "obsolete in the spec");
            }
            "superseded" => {
                assert_eq!(status, "untestable");
                // Every superseded row of the table names its replacement: "<id>.2.1".
                assert_eq!(field(item, "reason"), format!("superseded by {id}.2.1"));
            }
            _ => {}
        }
    }
}

#[test]
fn text_report_matches_json_and_totals_add_up() {
    let text = stdout_ok(&[]);
    let lines: Vec<&str> = text.lines().collect();
    let (total_line, rows) = lines.split_last().expect("output");
    let [n, covered, todo, untestable] = totals(total_line);
    assert_eq!(n, 274);
    assert_eq!(rows.len(), n);
    assert_eq!(covered + todo + untestable, n);

    let items = json(&[]);
    let mut counts: HashMap<&str, usize> = HashMap::new();
    for (line, item) in rows.iter().zip(&items) {
        let mut words = line.split_whitespace();
        assert_eq!(words.next(), Some(field(item, "id")));
        let status = field(item, "status");
        assert_eq!(words.next(), Some(status));
        assert_eq!(words.next(), Some(field(item, "service")));
        *counts.entry(status).or_default() += 1;
    }
    assert_eq!(counts.get("covered").copied().unwrap_or(0), covered);
    assert_eq!(counts.get("todo").copied().unwrap_or(0), todo);
    assert_eq!(counts.get("untestable").copied().unwrap_or(0), untestable);
}

#[test]
fn report_marks_c9_208_covered_by_its_native_ib_test() {
    let items = json(&[]);
    let c9_208 = items
        .iter()
        .find(|i| field(i, "id") == "C9-208")
        .expect("C9-208 listed");
    assert_eq!(field(c9_208, "status"), "covered");
    let tests: Vec<&str> = c9_208["tests"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap())
        .collect();
    assert!(
        tests.contains(&"c9_208_raw_ipv6_never_carries_iba_transport"),
        "{tests:?}"
    );
}

#[test]
fn untestable_list_gives_the_reason() {
    let items = json(&["--status", "untestable"]);
    let o9_146 = items
        .iter()
        .find(|i| field(i, "id") == "o9-146")
        .expect("o9-146 is untestable");
    assert!(field(o9_146, "reason").starts_with("Implementation-defined"));
}

#[test]
fn filters_select_by_service_and_status() {
    let all = json(&[]);
    for status in ["covered", "todo", "untestable"] {
        let some = json(&["--status", status]);
        let expected = all.iter().filter(|i| field(i, "status") == status).count();
        assert_eq!(some.len(), expected, "--status {status}");
        assert!(some.iter().all(|i| field(i, "status") == status));
    }

    let spec = spec_rows();
    for service in ["rc", "uc", "ud", "rd", "xrc", "raw"] {
        let some = json(&["--service", service]);
        let expected: Vec<&str> = spec
            .iter()
            .filter(|(_, _, s)| s.split('+').any(|x| x.eq_ignore_ascii_case(service)))
            .map(|(id, _, _)| id.as_str())
            .collect();
        let got: Vec<&str> = some.iter().map(|i| field(i, "id")).collect();
        assert_eq!(got, expected, "--service {service}");
    }
    // `rc` is a service name, not a substring: XRC-only rows are not RC rows.
    let rc = json(&["--service", "rc"]);
    assert!(rc.iter().all(|i| field(i, "service") != "XRC"));

    let text = stdout_ok(&["--service", "raw", "--status", "untestable"]);
    let total = text.lines().last().unwrap();
    let [n, covered, todo, untestable] = totals(total);
    assert_eq!((covered, todo, untestable), (0, 0, n));
    assert!(n >= 1, "o9-146 is RAW and untestable");
}

#[test]
fn explicit_table_path() {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("compliance_cmd");
    std::fs::create_dir_all(&dir).unwrap();
    let tsv = dir.join("small.tsv");
    std::fs::write(
        &tsv,
        "id\tstatus\tservice\trole\ttopic\trequirement\ttestable\tseed\ttwin_of\tsection\tnotes\n\
         C9-208\tactive\tRAW\tCA\traw\tr\tyes\ts\t\t9.8.4\t\n\
         C9-999\tactive\tUD\tCA\tx\tr\tyes\ts\t\t9\t\n\
         C9-150\tsuperseded\tRC\tboth\tx\tsuperseded by C9-150.2.1 (see that row).\tn/a\ts\t\t9\t\n",
    )
    .unwrap();
    let text = stdout_ok(&["--tsv", tsv.to_str().unwrap()]);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 4, "{text}");
    assert!(lines[0].starts_with("C9-208  covered"), "{}", lines[0]);
    assert!(lines[1].starts_with("C9-999  todo"), "{}", lines[1]);
    assert!(
        lines[2].ends_with("untestable  RC   superseded by C9-150.2.1"),
        "{}",
        lines[2]
    );
    assert_eq!(lines[3], "3 statements: 1 covered, 1 todo, 1 untestable");
}

#[test]
fn missing_table_is_a_clear_error() {
    let out = softib(&["--tsv", "/nonexistent/compliance.tsv"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("/nonexistent/compliance.tsv"), "{err}");
    assert!(err.contains("--tsv"), "{err}");
    assert!(out.stdout.is_empty());
}
