//! Finishing a generated OpenAPI document: security schemes, and which operations need them.

use utoipa::openapi::OpenApi;
use utoipa::openapi::security::{SecurityRequirement, SecurityScheme};

/// Adds `schemes` to the document and requires any one of them on every operation whose path
/// is not in `public_paths`.
pub fn require_security(
    document: &mut OpenApi,
    schemes: Vec<(&str, SecurityScheme)>,
    public_paths: &[&str],
) {
    let components = document.components.get_or_insert_with(Default::default);
    let mut requirements = Vec::new();
    for (name, scheme) in schemes {
        components.add_security_scheme(name, scheme);
        requirements.push(SecurityRequirement::new(name, Vec::<String>::new()));
    }
    for (path, item) in document.paths.paths.iter_mut() {
        if public_paths.contains(&path.as_str()) {
            continue;
        }
        for operation in [
            &mut item.get,
            &mut item.post,
            &mut item.put,
            &mut item.delete,
            &mut item.patch,
            &mut item.head,
            &mut item.options,
            &mut item.trace,
        ]
        .into_iter()
        .flatten()
        {
            operation.security = Some(requirements.clone());
        }
    }
}
