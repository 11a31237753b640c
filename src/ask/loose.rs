//! Decoding peer JSON field by field: [`Loose`] keeps a field of the wrong type apart instead
//! of failing the whole body (the checks then refuse or drop it with their own message, as
//! dsh-ask-peer's do), and [`Obj`] accepts only a JSON object (a derived struct would also
//! take an array, field by position).

use serde::Deserialize;
use serde::de::{Deserializer, MapAccess, Visitor, value::MapAccessDeserializer};
use std::fmt;
use std::marker::PhantomData;

/// A JSON value that is either a `T` or anything else.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(untagged)]
pub enum Loose<T> {
    Is(T),
    Not(serde::de::IgnoredAny),
}

impl<T> Loose<T> {
    /// The value when it has the expected type.
    pub fn as_ref(&self) -> Option<&T> {
        match self {
            Loose::Is(t) => Some(t),
            Loose::Not(_) => None,
        }
    }
}

/// The value of an optional field that arrived with its type (`null` counts as absent).
pub fn typed<T>(v: &Option<Loose<T>>) -> Option<&T> {
    v.as_ref().and_then(Loose::as_ref)
}

/// A `T` decoded from a JSON object only.
#[derive(Clone, Debug, PartialEq)]
pub struct Obj<T>(pub T);

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Obj<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Obj<T>, D::Error> {
        struct Only<T>(PhantomData<T>);
        impl<'de, T: Deserialize<'de>> Visitor<'de> for Only<T> {
            type Value = Obj<T>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Obj<T>, A::Error> {
                T::deserialize(MapAccessDeserializer::new(map)).map(Obj)
            }
        }
        d.deserialize_map(Only(PhantomData))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Default, Deserialize)]
    struct S {
        #[serde(default)]
        a: Option<Loose<u64>>,
    }

    #[test]
    fn wrong_types_stay_apart_and_only_objects_are_objects() {
        let s: Obj<S> = serde_json::from_str(r#"{"a": "x"}"#).unwrap();
        assert!(matches!(s.0.a, Some(Loose::Not(_))));
        let s: Obj<S> = serde_json::from_str(r#"{"a": 3, "b": [1]}"#).unwrap();
        assert_eq!(typed(&s.0.a), Some(&3));
        assert!(serde_json::from_str::<Obj<S>>("[3]").is_err());
        assert!(serde_json::from_str::<S>("[3]").is_ok(), "why Obj exists");
        let l: Vec<Loose<Obj<S>>> = serde_json::from_str(r#"[[3], {"a": null}]"#).unwrap();
        assert!(l[0].as_ref().is_none() && typed(&l[1].as_ref().unwrap().0.a).is_none());
    }
}
