//! kubectl's JSONPath templates, the part `-o jsonpath=` uses for one
//! object: literal text, `{.field.path}`, index and wildcard
//! (`[0]`, `[*]`), equality filters (`[?(@.type=="Ready")]`), and
//! `{range <path>}...{end}`. Strings print bare, other values as JSON,
//! several results separated by spaces, and a missing field prints
//! nothing (kubectl turns on allowMissingKeys for `-o jsonpath`). That is
//! what liken-init's blessing asks (`bless::NODE_JSONPATH`); a template
//! beyond it is an error, never a guess.

use serde_json::Value;

#[derive(Debug, PartialEq)]
enum Step {
    Field(String),
    Index(usize),
    All,
    Filter(Vec<String>, String),
}

#[derive(Debug, PartialEq)]
enum Part {
    Text(String),
    Path(Vec<Step>),
    Range(Vec<Step>, Vec<Part>),
}

fn parse_path(text: &str) -> Result<Vec<Step>, String> {
    let mut steps = Vec::new();
    let mut rest = text.trim();
    if rest == "." || rest == "@" {
        return Ok(steps);
    }
    while !rest.is_empty() {
        if let Some(r) = rest.strip_prefix('.') {
            let end = r.find(['.', '[']).unwrap_or(r.len());
            if end == 0 {
                return Err(format!("an empty field name in {text:?}"));
            }
            steps.push(Step::Field(r[..end].to_owned()));
            rest = &r[end..];
        } else if let Some(r) = rest.strip_prefix('[') {
            let end = r
                .find(']')
                .ok_or_else(|| format!("an unclosed [ in {text:?}"))?;
            let inner = &r[..end];
            rest = &r[end + 1..];
            if inner == "*" {
                steps.push(Step::All);
            } else if let Ok(i) = inner.parse() {
                steps.push(Step::Index(i));
            } else if let Some(f) = inner.strip_prefix("?(@").and_then(|f| f.strip_suffix(')')) {
                let (path, value) = f
                    .split_once("==")
                    .ok_or_else(|| format!("only == filters are read, not {inner:?}"))?;
                let fields = path
                    .trim()
                    .trim_start_matches('.')
                    .split('.')
                    .map(str::to_owned)
                    .collect();
                let value = value.trim().trim_matches(|c| c == '"' || c == '\'');
                steps.push(Step::Filter(fields, value.to_owned()));
            } else {
                return Err(format!("[{inner}] is not read"));
            }
        } else {
            return Err(format!("{text:?} is not a path starting with ."));
        }
    }
    Ok(steps)
}

fn parse(template: &str) -> Result<Vec<Part>, String> {
    fn parts(chars: &mut &str, in_range: bool) -> Result<Vec<Part>, String> {
        let mut out = Vec::new();
        loop {
            if chars.is_empty() {
                return if in_range {
                    Err("a {range} without {end}".into())
                } else {
                    Ok(out)
                };
            }
            match chars.find('{') {
                Some(0) => {
                    let end = chars.find('}').ok_or("an unclosed {")?;
                    let inner = chars[1..end].trim().to_owned();
                    *chars = &chars[end + 1..];
                    if inner == "end" {
                        return if in_range {
                            Ok(out)
                        } else {
                            Err("an {end} without {range}".into())
                        };
                    }
                    if let Some(p) = inner.strip_prefix("range ") {
                        let path = parse_path(p)?;
                        out.push(Part::Range(path, parts(chars, true)?));
                    } else {
                        out.push(Part::Path(parse_path(&inner)?));
                    }
                }
                Some(n) => {
                    out.push(Part::Text(chars[..n].to_owned()));
                    *chars = &chars[n..];
                }
                None => {
                    out.push(Part::Text((*chars).to_owned()));
                    *chars = "";
                }
            }
        }
    }
    let mut chars = template;
    parts(&mut chars, false)
}

fn walk<'a>(root: &'a Value, steps: &[Step]) -> Vec<&'a Value> {
    let mut here = vec![root];
    for s in steps {
        let mut next = Vec::new();
        for v in here {
            match s {
                Step::Field(f) => next.extend(v.get(f)),
                Step::Index(i) => next.extend(v.get(*i)),
                Step::All => next.extend(v.as_array().into_iter().flatten()),
                Step::Filter(fields, want) => {
                    for item in v.as_array().into_iter().flatten() {
                        let mut got = item;
                        for f in fields {
                            got = got.get(f).unwrap_or(&Value::Null);
                        }
                        let matches = match got {
                            Value::String(s) => s == want,
                            Value::Null => false,
                            other => other.to_string().as_str() == want.as_str(),
                        };
                        if matches {
                            next.push(item);
                        }
                    }
                }
            }
        }
        here = next;
    }
    here
}

fn text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn render(parts: &[Part], here: &Value, out: &mut String) {
    for p in parts {
        match p {
            Part::Text(t) => out.push_str(t),
            Part::Path(steps) => {
                let values: Vec<String> = walk(here, steps).into_iter().map(text).collect();
                out.push_str(&values.join(" "));
            }
            Part::Range(steps, body) => {
                let found = walk(here, steps);
                // A range over one array walks its items.
                let items: Vec<&Value> = match found.as_slice() {
                    [Value::Array(a)] => a.iter().collect(),
                    _ => found,
                };
                for item in items {
                    render(body, item, out);
                }
            }
        }
    }
}

/// Renders `template` over `object`.
pub fn evaluate(template: &str, object: &Value) -> Result<String, String> {
    let parts = parse(template)?;
    let mut out = String::new();
    render(&parts, object, &mut out);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// liken-init's blessing template (liken-init/src/bless.rs,
    /// NODE_JSONPATH), over a Node.
    const BLESS: &str = "{.metadata.name} {range .status.conditions[?(@.type==\"Ready\")]}\
                         {.status} {.lastHeartbeatTime} {.reason}{end}";

    #[test]
    fn renders_what_kubectl_renders() {
        let node = json!({"metadata": {"name": "node-1", "labels": {"a": "b"}},
            "status": {"conditions": [
                {"type": "MemoryPressure", "status": "False", "reason": "Ok", "lastHeartbeatTime": "t0"},
                {"type": "Ready", "status": "True", "reason": "KubeletReady", "lastHeartbeatTime": "2026-12-03T10:00:00Z"}]}});
        let cases = [
            (BLESS, "node-1 True 2026-12-03T10:00:00Z KubeletReady"),
            ("{.metadata.name}", "node-1"),
            ("{.metadata.labels}", "{\"a\":\"b\"}"),
            ("{.status.conditions[0].type}", "MemoryPressure"),
            ("{.status.conditions[*].type}", "MemoryPressure Ready"),
            (
                "{range .status.conditions[*]}{.type}={.status};{end}",
                "MemoryPressure=False;Ready=True;",
            ),
            ("{.metadata.missing}x", "x"),
        ];
        for (t, want) in cases {
            assert_eq!(evaluate(t, &node).unwrap(), want, "{t}");
        }
        let none = json!({"metadata": {"name": "node-2"}, "status": {}});
        assert_eq!(evaluate(BLESS, &none).unwrap(), "node-2 ");
        for bad in ["{.a", "{range .a}", "{end}", "{.a[?(@.b>1)]}", "{a}"] {
            assert!(evaluate(bad, &node).is_err(), "{bad}");
        }
    }
}
