//! Wire enums of names (`"png"`, `"left"`, `"networkidle"`): [`name_enum!`] defines one so
//! that the OpenAPI document and the MCP tool schemas list its values, while sandboxd keeps
//! accepting what AIO's clients send: any ASCII case, surrounding whitespace, and aliases.
//! A value is always sent (and listed) under its canonical name.

/// Defines a `Copy` enum of names: each value's canonical spelling and aliases, and the name of
/// the field it fills, so that a refusal names the field even where the parser cannot say
/// where it was (query strings, tagged enums):
///
/// ```text
/// name_enum! {
///     /// Doc comment.
///     pub enum ImageFormat, "format" {
///         Png = "png",
///         Jpeg = "jpeg" | "jpg",
///     }
/// }
/// ```
///
/// Serialization, `utoipa::ToSchema` and `schemars::JsonSchema` come from derives (so the
/// schemas list the canonical names); deserialization goes through `parse`.
macro_rules! name_enum {
    (
        $(#[$meta:meta])*
        pub enum $name:ident, $what:literal {
            $(
                $(#[$variant_meta:meta])*
                // `tt`, not `literal`: a `literal` fragment reaches the derives wrapped in an
                // invisible group, and utoipa and schemars then ignore the `rename`.
                $variant:ident = $canonical:tt $(| $alias:tt)*
            ),+ $(,)?
        }
    ) => {
        $(#[$meta])*
        #[derive(
            Debug,
            Clone,
            Copy,
            PartialEq,
            Eq,
            serde::Serialize,
            utoipa::ToSchema,
            schemars::JsonSchema,
        )]
        pub enum $name {
            $(
                $(#[$variant_meta])*
                #[serde(rename = $canonical)]
                $variant,
            )+
        }

        impl $name {
            /// Every value, in the order the schema lists them.
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            /// Every name read, canonical and aliases, in the schema's order.
            pub const NAMES: &'static [&'static str] = &[$($canonical $(, $alias)*),+];

            /// Each canonical name with its aliases: what a refusal lists.
            const CHOICES: &'static [(&'static str, &'static [&'static str])] =
                &[$(($canonical, &[$($alias),*])),+];

            /// The canonical name: how it is sent and listed.
            pub fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $canonical,)+
                }
            }

            /// A name in any ASCII case, surrounding whitespace ignored, aliases included.
            pub fn parse(text: &str) -> Option<Self> {
                let text = text.trim();
                $(
                    if text.eq_ignore_ascii_case($canonical)
                        $(|| text.eq_ignore_ascii_case($alias))*
                    {
                        return Some($name::$variant);
                    }
                )+
                None
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl<'de> serde::Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                let text = String::deserialize(deserializer)?;
                Self::parse(&text).ok_or_else(|| {
                    <D::Error as serde::de::Error>::custom(format_args!(
                        "unknown {} {:?}: expected one of {}",
                        $what,
                        text,
                        $crate::types::names::listed(Self::CHOICES),
                    ))
                })
            }
        }
    };
}

pub(crate) use name_enum;

/// `a, b (or b2, b3), c`: every name a refusal's field accepts.
#[doc(hidden)]
pub fn listed(choices: &[(&str, &[&str])]) -> String {
    choices
        .iter()
        .map(|(canonical, aliases)| match aliases {
            [] => (*canonical).to_string(),
            aliases => format!("{canonical} (or {})", aliases.join(", ")),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    name_enum! {
        /// A test enum.
        pub enum Fruit, "fruit" {
            Apple = "apple",
            Pear = "pear" | "poire",
        }
    }

    #[test]
    fn names_are_read_in_any_case_with_aliases_and_written_canonically() {
        for (text, expected) in [
            ("apple", Fruit::Apple),
            ("APPLE", Fruit::Apple),
            (" Apple\n", Fruit::Apple),
            ("pear", Fruit::Pear),
            ("Poire", Fruit::Pear),
        ] {
            let parsed: Fruit = serde_json::from_value(serde_json::json!(text)).unwrap();
            assert_eq!(parsed, expected, "{text:?}");
        }
        assert_eq!(serde_json::to_value(Fruit::Pear).unwrap(), "pear");
        let error = serde_json::from_value::<Fruit>(serde_json::json!("plum")).unwrap_err();
        assert_eq!(
            error.to_string(),
            "unknown fruit \"plum\": expected one of apple, pear (or poire)"
        );
        assert_eq!(Fruit::ALL, [Fruit::Apple, Fruit::Pear]);
        // The refusal lists every name that is read, no fewer.
        for name in Fruit::NAMES {
            assert!(error.to_string().contains(name), "{name}: {error}");
            assert!(Fruit::parse(name).is_some(), "{name}");
        }
        assert!(serde_json::from_value::<Fruit>(serde_json::json!(3)).is_err());
    }

    /// The OpenAPI and JSON schemas list the canonical names (a `literal` macro fragment
    /// instead of `tt` would hide the renames from the derives, listing `Apple`, `Pear`).
    #[test]
    fn the_schemas_list_the_canonical_names() {
        let openapi = serde_json::to_value(<Fruit as utoipa::PartialSchema>::schema()).unwrap();
        assert_eq!(
            openapi["enum"],
            serde_json::json!(["apple", "pear"]),
            "{openapi}"
        );
        let json_schema = serde_json::to_value(schemars::schema_for!(Fruit)).unwrap();
        assert_eq!(
            json_schema["enum"],
            serde_json::json!(["apple", "pear"]),
            "{json_schema}"
        );
    }
}
