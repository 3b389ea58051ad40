//! `softib compliance`: the report lists every (statement, service) pair of the spec's
//! compliance table once, in table order, with one of the three statuses, and its totals add up.

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

/// (id, status, services) of every statement row of the spec's table, in file order.
fn spec_rows() -> Vec<(String, String, Vec<String>)> {
    let text = std::fs::read_to_string(SPEC_TSV).expect("read the spec's compliance.tsv");
    text.lines()
        .skip(1)
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let f: Vec<&str> = l.split('\t').collect();
            let services = f[2].split('+').map(str::to_owned).collect();
            (f[0].to_owned(), f[1].to_owned(), services)
        })
        .collect()
}

/// (id, service) of every pair of the spec's table, in report order.
fn spec_pairs(spec: &[(String, String, Vec<String>)]) -> Vec<(&str, &str)> {
    spec.iter()
        .flat_map(|(id, _, services)| services.iter().map(move |s| (id.as_str(), s.as_str())))
        .collect()
}

/// Parses `P (statement, service) pairs of S statements: C covered, T todo, U untestable`.
fn totals(line: &str) -> [usize; 5] {
    let nums: Vec<usize> = line
        .split(|c: char| !c.is_ascii_digit())
        .filter(|s| !s.is_empty())
        .map(|s| s.parse().unwrap())
        .collect();
    assert_eq!(nums.len(), 5, "{line}");
    let expected = format!(
        "{} (statement, service) pairs of {} statements: {} covered, {} todo, {} untestable",
        nums[0], nums[1], nums[2], nums[3], nums[4]
    );
    assert_eq!(line, expected);
    [nums[0], nums[1], nums[2], nums[3], nums[4]]
}

fn test_names(item: &Value) -> Vec<&str> {
    item["tests"]
        .as_array()
        .expect("tests array")
        .iter()
        .map(|t| t.as_str().expect("test name"))
        .collect()
}

/// The report row of (id, service).
fn pair<'a>(items: &'a [Value], id: &str, service: &str) -> &'a Value {
    items
        .iter()
        .find(|i| field(i, "id") == id && field(i, "service") == service)
        .unwrap_or_else(|| panic!("({id}, {service}) listed"))
}

#[test]
fn json_lists_every_pair_once_in_table_order() {
    let items = json(&[]);
    let spec = spec_rows();
    assert_eq!(spec.len(), 274);
    let pairs = spec_pairs(&spec);
    assert_eq!(pairs.len(), 483);
    let got: Vec<(&str, &str)> = items
        .iter()
        .map(|i| (field(i, "id"), field(i, "service")))
        .collect();
    let unique: HashSet<(&str, &str)> = got.iter().copied().collect();
    assert_eq!(unique.len(), got.len(), "duplicate pairs");
    assert_eq!(got, pairs);

    let by_id: HashMap<&str, &(String, String, Vec<String>)> =
        spec.iter().map(|row| (row.0.as_str(), row)).collect();
    for item in &items {
        let (id, service) = (field(item, "id"), field(item, "service"));
        let (_, spec_status, services) = by_id[id];
        let status = field(item, "status");
        assert!(
            ["covered", "todo", "untestable"].contains(&status),
            "{id} {service}: status {status}"
        );
        let tests = test_names(item);
        let prefix = format!("{}_", id.to_lowercase().replace(['-', '.'], "_"));
        for name in &tests {
            let rest = name
                .strip_prefix(&prefix)
                .unwrap_or_else(|| panic!("{id}: test {name}"));
            // The test names this service as a word, or names none of the statement's
            // services and this is the first one listed.
            let named: Vec<&String> = services
                .iter()
                .filter(|s| rest.split('_').any(|w| w == s.to_lowercase()))
                .collect();
            assert!(
                named.iter().any(|s| *s == service) || (named.is_empty() && service == services[0]),
                "{id} {service}: test {name}"
            );
        }
        match status {
            "covered" => assert!(!tests.is_empty(), "{id} {service} covered without tests"),
            "todo" => assert!(tests.is_empty(), "{id} {service} todo with tests {tests:?}"),
            _ => {}
        }
        assert_eq!(
            item.get("reason").is_some(),
            status == "untestable",
            "{id} {service}: a reason goes with untestable, and only with it"
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
    let [pairs, statements, covered, todo, untestable] = totals(total_line);
    assert_eq!((pairs, statements), (483, 274));
    assert_eq!(rows.len(), pairs);
    assert_eq!(covered + todo + untestable, pairs);

    let items = json(&[]);
    assert_eq!(items.len(), pairs);
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
    let c9_208 = pair(&items, "C9-208", "RAW");
    assert_eq!(field(c9_208, "status"), "covered");
    let tests = test_names(c9_208);
    assert!(
        tests.contains(&"c9_208_raw_ipv6_never_carries_iba_transport"),
        "{tests:?}"
    );
}

#[test]
fn a_test_naming_no_service_covers_the_first_listed_one() {
    // C9-91 binds RC+RD+XRC; its RC test does not say so, and covers RC alone.
    let items = json(&[]);
    let name = "c9_91_send_longer_than_receive_buffer_naks_invalid_request";
    let rc = pair(&items, "C9-91", "RC");
    assert_eq!(field(rc, "status"), "covered");
    assert!(test_names(rc).contains(&name), "{rc}");
    for service in ["RD", "XRC"] {
        let other = pair(&items, "C9-91", service);
        assert!(!test_names(other).contains(&name), "{other}");
    }
}

#[test]
fn untestable_list_gives_the_reason() {
    let items = json(&["--status", "untestable"]);
    let o9_146 = pair(&items, "o9-146", "RAW");
    assert!(field(o9_146, "reason").starts_with("Implementation-defined"));

    // `o9-29@RC` makes the RC pair of the RC+RD+XRC statement untestable, not the others.
    let all = json(&[]);
    let rc = pair(&all, "o9-29", "RC");
    assert_eq!(field(rc, "status"), "untestable");
    assert!(
        field(rc, "reason").starts_with("For RC this statement binds a TCA"),
        "{rc}"
    );
    for service in ["RD", "XRC"] {
        assert_ne!(field(pair(&all, "o9-29", service), "status"), "untestable");
    }
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
            .filter(|(_, _, s)| s.iter().any(|x| x.eq_ignore_ascii_case(service)))
            .map(|(id, _, _)| id.as_str())
            .collect();
        let got: Vec<&str> = some.iter().map(|i| field(i, "id")).collect();
        assert_eq!(got, expected, "--service {service}");
        // Only the pairs of that service; `rc` is a name, not a substring of `xrc`.
        let upper = service.to_uppercase();
        assert!(some.iter().all(|i| field(i, "service") == upper));
    }

    let text = stdout_ok(&["--service", "raw", "--status", "untestable"]);
    let total = text.lines().last().unwrap();
    let [pairs, statements, covered, todo, untestable] = totals(total);
    assert_eq!(
        (statements, covered, todo, untestable),
        (pairs, 0, 0, pairs)
    );
    assert!(pairs >= 1, "o9-146 is RAW and untestable");
}

#[test]
fn explicit_table_path() {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("compliance_cmd");
    std::fs::create_dir_all(&dir).unwrap();
    let tsv = dir.join("small.tsv");
    // C9-91 is given services its tests never name, so its (untagged) RC test covers the
    // first of them here.
    std::fs::write(
        &tsv,
        "id\tstatus\tservice\trole\ttopic\trequirement\ttestable\tseed\ttwin_of\tsection\tnotes\n\
         C9-208\tactive\tRAW\tCA\traw\tr\tyes\ts\t\t9.8.4\t\n\
         C9-999\tactive\tUD+UC\tCA\tx\tr\tyes\ts\t\t9\t\n\
         C9-150\tsuperseded\tRC+XRC\tboth\tx\tsuperseded by C9-150.2.1 (see that row).\tn/a\ts\t\t9\t\n\
         C9-91\tactive\tRD+UD\tCA\tx\tr\tyes\ts\t\t9\t\n",
    )
    .unwrap();
    let text = stdout_ok(&["--tsv", tsv.to_str().unwrap()]);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 8, "{text}");
    assert!(
        lines[0].starts_with("C9-208  covered     RAW  c9_208_"),
        "{}",
        lines[0]
    );
    assert_eq!(lines[1], "C9-999  todo        UD   -");
    assert_eq!(lines[2], "C9-999  todo        UC   -");
    assert_eq!(
        lines[3],
        "C9-150  untestable  RC   superseded by C9-150.2.1"
    );
    assert_eq!(
        lines[4],
        "C9-150  untestable  XRC  superseded by C9-150.2.1"
    );
    assert!(
        lines[5].starts_with("C9-91   covered     RD   ")
            && lines[5].contains("c9_91_send_longer_than_receive_buffer_naks_invalid_request"),
        "{}",
        lines[5]
    );
    assert_eq!(lines[6], "C9-91   todo        UD   -");
    assert_eq!(
        lines[7],
        "7 (statement, service) pairs of 4 statements: 2 covered, 3 todo, 2 untestable"
    );
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
