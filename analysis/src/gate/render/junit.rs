//! JUnit XML for CI systems (GitLab `artifacts:reports:junit`, GitHub test reporters):
//! one test case per entry; a regression is a `<failure>`, a gated metric that was not
//! measured an `<error>`, a missing entry `<skipped>`.

use super::{deltas, rule_line};
use crate::gate::compare::{GateReport, Status};
use quick_xml::events::{BytesDecl, BytesEnd, BytesStart, BytesText, Event};
use quick_xml::Writer;

pub fn render(r: &GateReport) -> String {
    let mut w = Writer::new_with_indent(Vec::new(), b' ', 2);
    // Writing into a Vec cannot fail; errors are ignored deliberately.
    let _ = write(&mut w, r);
    String::from_utf8_lossy(&w.into_inner()).into_owned()
}

fn write(w: &mut Writer<Vec<u8>>, r: &GateReport) -> std::io::Result<()> {
    let s = &r.summary;
    let tests = s.entries.to_string();
    let failures = s.regressed.to_string();
    let skipped = s.missing.to_string();
    let errors = r
        .entries
        .iter()
        .filter(|e| e.status == Status::Incomplete)
        .count()
        .to_string();
    w.write_event(Event::Decl(BytesDecl::new("1.0", Some("UTF-8"), None)))?;
    let attrs = [
        ("name", "memwatch gate"),
        ("tests", tests.as_str()),
        ("failures", failures.as_str()),
        ("errors", errors.as_str()),
        ("skipped", skipped.as_str()),
    ];
    w.write_event(Event::Start(
        BytesStart::new("testsuites").with_attributes(attrs),
    ))?;
    w.write_event(Event::Start(
        BytesStart::new("testsuite").with_attributes(attrs),
    ))?;
    for e in &r.entries {
        let case = BytesStart::new("testcase")
            .with_attributes([("classname", "memwatch.gate"), ("name", e.key.as_str())]);
        let changed = deltas(e, |s| format!("{s} (regressed)"));
        match e.status {
            Status::Regressed => {
                w.write_event(Event::Start(case))?;
                let regressed: Vec<String> = e
                    .metrics
                    .iter()
                    .filter(|d| d.regressed)
                    .filter_map(super::describe_delta)
                    .collect();
                let message = format!("{}: {}", e.key, regressed.join("; "));
                let mut body = changed.join("\n");
                for g in &e.op_growth {
                    body.push_str(&format!(
                        "\nop {}: {} -> {} bytes (+{})",
                        g.name, g.baseline_bytes, g.current_bytes, g.delta_bytes
                    ));
                }
                body.push('\n');
                body.push_str(&rule_line(e.max_increase_percent, e.max_increase_bytes));
                w.write_event(Event::Start(BytesStart::new("failure").with_attributes([
                    ("message", message.as_str()),
                    ("type", "MemoryRegression"),
                ])))?;
                w.write_event(Event::Text(BytesText::new(&body)))?;
                w.write_event(Event::End(BytesEnd::new("failure")))?;
                w.write_event(Event::End(BytesEnd::new("testcase")))?;
            }
            Status::Incomplete => {
                w.write_event(Event::Start(case))?;
                let lacking: Vec<String> = e
                    .doubt
                    .iter()
                    .map(|d| format!("not judged: {d}"))
                    .chain(e.metrics.iter().filter_map(super::describe_unmeasured))
                    .collect();
                let message = format!("{}: {}", e.key, lacking.join("; "));
                w.write_event(Event::Start(BytesStart::new("error").with_attributes([
                    ("message", message.as_str()),
                    ("type", "MetricNotMeasured"),
                ])))?;
                w.write_event(Event::Text(BytesText::new(&changed.join("\n"))))?;
                w.write_event(Event::End(BytesEnd::new("error")))?;
                w.write_event(Event::End(BytesEnd::new("testcase")))?;
            }
            Status::Missing => {
                w.write_event(Event::Start(case))?;
                w.write_event(Event::Empty(
                    BytesStart::new("skipped")
                        .with_attributes([("message", "in the baseline but not measured")]),
                ))?;
                w.write_event(Event::End(BytesEnd::new("testcase")))?;
            }
            _ => {
                w.write_event(Event::Start(case))?;
                let out = format!(
                    "{}{}",
                    e.status.label(),
                    if changed.is_empty() {
                        String::new()
                    } else {
                        format!(": {}", changed.join("; "))
                    }
                );
                w.write_event(Event::Start(BytesStart::new("system-out")))?;
                w.write_event(Event::Text(BytesText::new(&out)))?;
                w.write_event(Event::End(BytesEnd::new("system-out")))?;
                w.write_event(Event::End(BytesEnd::new("testcase")))?;
            }
        }
    }
    w.write_event(Event::End(BytesEnd::new("testsuite")))?;
    w.write_event(Event::End(BytesEnd::new("testsuites")))?;
    Ok(())
}
