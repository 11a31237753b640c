//! Strict reading of one tool's JSON arguments: unknown keys are refused, every value is
//! checked for type and bound, and each failure is a one-line `USAGE` error naming the
//! argument and the expected type.

use crate::error::{Code, Error, Result};
use serde_json::{Map, Value};

/// Largest integer a JSON number can carry exactly (2^53 - 1); larger values are refused
/// because JavaScript clients would already have rounded them.
pub const JSON_SAFE_INTEGER_MAX: u64 = (1 << 53) - 1;

/// The argument object of one call, with the tool (and op) name for messages.
pub struct Args<'a> {
    tool: &'a str,
    map: &'a Map<String, Value>,
}

impl<'a> Args<'a> {
    /// Accepts an object, or `null`/absent as an empty object (MCP `arguments` is optional).
    pub fn new(tool: &'a str, value: &'a Value, empty: &'a Map<String, Value>) -> Result<Args<'a>> {
        match value {
            Value::Object(map) => Ok(Args { tool, map }),
            Value::Null => Ok(Args { tool, map: empty }),
            other => Err(usage(
                tool,
                format!("arguments must be a JSON object, not {}", kind(other)),
            )),
        }
    }

    /// Same map, new label (for `coordinate_resource op=…` messages).
    pub fn relabel(&self, tool: &'a str) -> Args<'a> {
        Args {
            tool,
            map: self.map,
        }
    }

    /// Refuses any key outside `allowed`.
    pub fn only(&self, allowed: &[&str]) -> Result<()> {
        if let Some(extra) = self.map.keys().find(|k| !allowed.contains(&k.as_str())) {
            let list = if allowed.is_empty() {
                "none".to_string()
            } else {
                allowed.join(", ")
            };
            return Err(usage(
                self.tool,
                format!(
                    "unknown argument `{}`; allowed: {list}",
                    crate::sanitize::line(extra, 40)
                ),
            ));
        }
        Ok(())
    }

    fn get(&self, name: &str) -> Option<&'a Value> {
        self.map.get(name).filter(|v| !v.is_null())
    }

    /// The raw value of an argument (`null` counts as absent).
    pub fn get_raw(&self, name: &str) -> Option<&'a Value> {
        self.get(name)
    }

    /// A `USAGE` error for this tool.
    pub fn error(&self, message: &str) -> Error {
        usage(self.tool, message.to_string())
    }

    /// An optional string of 1..=`max_chars` characters.
    pub fn opt_str(&self, name: &str, max_chars: usize) -> Result<Option<String>> {
        let Some(v) = self.get(name) else {
            return Ok(None);
        };
        let s = v.as_str().ok_or_else(|| {
            usage(
                self.tool,
                format!("{}, not {}", str_expected(name, max_chars), kind(v)),
            )
        })?;
        check_str(self.tool, name, s, max_chars)?;
        Ok(Some(s.to_string()))
    }

    /// A required string of 1..=`max_chars` characters.
    pub fn req_str(&self, name: &str, max_chars: usize) -> Result<String> {
        self.opt_str(name, max_chars)?.ok_or_else(|| {
            usage(
                self.tool,
                format!("argument `{name}` is required (string of 1-{max_chars} characters)"),
            )
        })
    }

    /// An optional one-line label: like [`Args::opt_str`] but control characters are refused.
    pub fn opt_label(&self, name: &str, max_chars: usize) -> Result<Option<String>> {
        let s = self.opt_str(name, max_chars)?;
        if let Some(s) = s.as_deref() {
            check_one_line(self.tool, name, s)?;
        }
        Ok(s)
    }

    /// An optional integer in `min..=max`.
    pub fn opt_int(&self, name: &str, min: u64, max: u64) -> Result<Option<u64>> {
        let Some(v) = self.get(name) else {
            return Ok(None);
        };
        match as_integer(v) {
            Some(n) if (min..=max).contains(&n) => Ok(Some(n)),
            _ => Err(usage(
                self.tool,
                format!(
                    "argument `{name}` must be an integer {min}..={max}, not {}",
                    show(v)
                ),
            )),
        }
    }

    /// An optional boolean.
    pub fn opt_bool(&self, name: &str) -> Result<Option<bool>> {
        let Some(v) = self.get(name) else {
            return Ok(None);
        };
        v.as_bool().map(Some).ok_or_else(|| {
            usage(
                self.tool,
                format!("argument `{name}` must be a boolean, not {}", kind(v)),
            )
        })
    }

    /// An optional string that must be one of `choices`.
    pub fn opt_enum(&self, name: &str, choices: &[&str]) -> Result<Option<String>> {
        let Some(v) = self.get(name) else {
            return Ok(None);
        };
        match v.as_str() {
            Some(s) if choices.contains(&s) => Ok(Some(s.to_string())),
            _ => Err(usage(
                self.tool,
                format!(
                    "argument `{name}` must be one of {}, not {}",
                    choices.join("|"),
                    show(v)
                ),
            )),
        }
    }
}

fn str_expected(name: &str, max_chars: usize) -> String {
    format!("argument `{name}` must be a non-empty string of at most {max_chars} characters")
}

/// A string argument's bound: 1..=`max_chars` characters (the check of [`Args::opt_str`]).
pub fn check_str(tool: &str, name: &str, s: &str, max_chars: usize) -> Result<()> {
    if s.is_empty() || s.chars().count() > max_chars {
        return Err(usage(tool, str_expected(name, max_chars)));
    }
    Ok(())
}

/// A label's line check: no control characters (the check of [`Args::opt_label`]).
pub fn check_one_line(tool: &str, name: &str, s: &str) -> Result<()> {
    if s.chars().any(char::is_control) {
        return Err(usage(
            tool,
            format!("argument `{name}` must be one line without control characters"),
        ));
    }
    Ok(())
}

/// A non-negative integer, also from an integral float such as `5.0`.
fn as_integer(v: &Value) -> Option<u64> {
    if let Some(n) = v.as_u64() {
        return (n <= JSON_SAFE_INTEGER_MAX).then_some(n);
    }
    let f = v.as_f64()?;
    // The range check makes the cast exact.
    (f.fract() == 0.0 && (0.0..=JSON_SAFE_INTEGER_MAX as f64).contains(&f)).then_some(f as u64)
}

/// The JSON type name of a value, for messages.
pub fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// A short, safe rendering of a scalar for messages; containers by their type only.
fn show(v: &Value) -> String {
    match v {
        Value::Number(n) => n.to_string(),
        Value::String(s) => format!("{:?}", crate::sanitize::line(s, 40)),
        other => kind(other).to_string(),
    }
}

/// A `USAGE` error prefixed with the tool name.
pub fn usage(tool: &str, message: String) -> Error {
    Error::new(Code::Usage, format!("{tool}: {message}"))
}
