//! Small helpers shared by subcommands on top of lexopt: typed values with usage errors that
//! name the flag, and `--help` printing.

use crate::error::{Code, Error, Result};
use std::ffi::OsString;

pub fn parser(args: Vec<OsString>) -> lexopt::Parser {
    lexopt::Parser::from_args(args)
}

pub fn usage(e: lexopt::Error) -> Error {
    Error::new(Code::Usage, crate::sanitize::line(&e.to_string(), 200))
}

pub fn string(p: &mut lexopt::Parser, flag: &str) -> Result<String> {
    let v = p.value().map_err(usage)?;
    v.into_string()
        .map_err(|_| Error::new(Code::Usage, format!("{flag} must be valid UTF-8")))
}

pub fn millis(p: &mut lexopt::Parser, flag: &str) -> Result<u64> {
    let s = string(p, flag)?;
    s.parse::<u64>().map_err(|_| {
        Error::new(
            Code::Usage,
            format!(
                "{flag} takes a whole number of milliseconds, got {:?}",
                crate::sanitize::line(&s, 20)
            ),
        )
    })
}

pub fn number(p: &mut lexopt::Parser, flag: &str) -> Result<u64> {
    let s = string(p, flag)?;
    s.parse::<u64>().map_err(|_| {
        Error::new(
            Code::Usage,
            format!(
                "{flag} takes a whole number, got {:?}",
                crate::sanitize::line(&s, 20)
            ),
        )
    })
}

pub fn unexpected(arg: lexopt::Arg<'_>) -> Error {
    usage(arg.unexpected())
}
