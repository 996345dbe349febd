//! Values between the Python guest and a plugin: the guest's self-describing nodes
//! (`plugins.node` in `wit/filerouter.wit`) to wasmtime's dynamic [`Val`]s of the types the
//! plugin declares, and back.
//!
//! Going in, Python values are checked against the parameter's type here, with a message that
//! names the argument and the place inside it. The node list comes from the guest and is
//! treated as hostile: every child index must point past its parent and be used once (no
//! cycles, no shared subtrees that would multiply), and nesting is bounded.

use wasmtime::component::{Val, types::Type};

use super::{python_name, wit_name};
use crate::sandbox::PluginNode as Node;

/// Deeper values than this are refused rather than risk the host's stack.
pub const MAX_DEPTH: usize = 64;

/// Why an argument could not be converted.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ConvertError {
    #[error("{0}")]
    WrongType(String),
    #[error("{0}")]
    OutOfRange(String),
}

/// A step into a value, for messages.
#[derive(Clone)]
enum Step {
    Field(String),
    Index(usize),
    Case(String),
    Payload,
}

/// Reads a guest's node list against declared types.
pub struct Reader<'a> {
    nodes: &'a [Node],
    used: Vec<bool>,
    path: Vec<Step>,
    /// The argument being read (`src`), for messages.
    argument: String,
}

impl<'a> Reader<'a> {
    pub fn new(nodes: &'a [Node]) -> Self {
        Self {
            nodes,
            used: vec![false; nodes.len()],
            path: Vec::new(),
            argument: String::new(),
        }
    }

    /// The children of the root `group` (the positional arguments), checked against `count`.
    pub fn arguments(&mut self, count: usize, function: &str) -> Result<Vec<u32>, ConvertError> {
        let root = match self.take(0, None) {
            Ok(Node::Group(children)) => children.clone(),
            _ => {
                return Err(ConvertError::WrongType(format!(
                    "{function}(): the arguments did not arrive as a tuple"
                )));
            }
        };
        if root.len() != count {
            return Err(ConvertError::WrongType(format!(
                "{function}() takes {count} argument{} but {} were given",
                if count == 1 { "" } else { "s" },
                root.len()
            )));
        }
        Ok(root)
    }

    /// Argument `name` at node `index` as a value of `ty`.
    pub fn argument(&mut self, name: &str, index: u32, ty: &Type) -> Result<Val, ConvertError> {
        self.argument = python_name(name);
        self.path.clear();
        self.read(index, 0, ty, 0)
    }

    fn take(&mut self, index: u32, parent: Option<u32>) -> Result<&'a Node, String> {
        let i = index as usize;
        if i >= self.nodes.len() || parent.is_some_and(|p| index <= p) || self.used[i] {
            return Err("the value is malformed (a node index out of order)".into());
        }
        self.used[i] = true;
        Ok(&self.nodes[i])
    }

    fn place(&self) -> String {
        let mut place = format!("argument `{}`", self.argument);
        for step in &self.path {
            match step {
                Step::Field(name) => place.push_str(&format!("[{:?}]", python_name(name))),
                Step::Index(i) => place.push_str(&format!("[{i}]")),
                Step::Case(case) => place.push_str(&format!(" (case {:?})", python_name(case))),
                Step::Payload => place.push_str(".value"),
            }
        }
        place
    }

    fn wrong(&self, expected: &str, node: &Node) -> ConvertError {
        ConvertError::WrongType(format!(
            "{}: expected {expected}, got {}",
            self.place(),
            kind(node)
        ))
    }

    fn read(
        &mut self,
        index: u32,
        parent: u32,
        ty: &Type,
        depth: usize,
    ) -> Result<Val, ConvertError> {
        if depth > MAX_DEPTH {
            return Err(ConvertError::WrongType(format!(
                "{}: nested more than {MAX_DEPTH} levels deep",
                self.place()
            )));
        }
        let parent = (depth > 0).then_some(parent);
        let node = self
            .take(index, parent)
            .map_err(|e| ConvertError::WrongType(format!("{}: {e}", self.place())))?;
        let deeper = depth + 1;
        Ok(match ty {
            Type::Bool => match node {
                Node::Boolean(b) => Val::Bool(*b),
                other => return Err(self.wrong("a bool (WIT bool)", other)),
            },
            Type::S8 => Val::S8(self.int(node, "s8")?),
            Type::U8 => Val::U8(self.int(node, "u8")?),
            Type::S16 => Val::S16(self.int(node, "s16")?),
            Type::U16 => Val::U16(self.int(node, "u16")?),
            Type::S32 => Val::S32(self.int(node, "s32")?),
            Type::U32 => Val::U32(self.int(node, "u32")?),
            Type::S64 => Val::S64(self.int(node, "s64")?),
            Type::U64 => Val::U64(self.int(node, "u64")?),
            Type::Float32 => Val::Float32(self.float(node, "f32")? as f32),
            Type::Float64 => Val::Float64(self.float(node, "f64")?),
            Type::Char => match node {
                Node::Text(s) => {
                    let mut chars = s.chars();
                    match (chars.next(), chars.next()) {
                        (Some(c), None) => Val::Char(c),
                        _ => {
                            return Err(ConvertError::WrongType(format!(
                                "{}: expected a str of one character (WIT char), got a str of {}",
                                self.place(),
                                s.chars().count()
                            )));
                        }
                    }
                }
                other => return Err(self.wrong("a str of one character (WIT char)", other)),
            },
            Type::String => match node {
                Node::Text(s) => Val::String(s.clone()),
                other => return Err(self.wrong("a str (WIT string)", other)),
            },
            Type::List(list) => {
                let element = list.ty();
                match node {
                    Node::Bytes(bytes) if matches!(element, Type::U8) => {
                        Val::List(bytes.iter().map(|b| Val::U8(*b)).collect())
                    }
                    Node::Items(children) | Node::Group(children) | Node::Members(children) => {
                        Val::List(self.elements(children, index, &element, deeper)?)
                    }
                    other => {
                        let expected = if matches!(element, Type::U8) {
                            "bytes or a list (WIT list<u8>)"
                        } else {
                            "a list (WIT list)"
                        };
                        return Err(self.wrong(expected, other));
                    }
                }
            }
            Type::FixedLengthList(list) => match node {
                Node::Items(children) | Node::Group(children)
                    if children.len() == list.len() as usize =>
                {
                    Val::FixedLengthList(self.elements(children, index, &list.ty(), deeper)?)
                }
                other => {
                    return Err(self.wrong(&format!("a list of {} items", list.len()), other));
                }
            },
            Type::Tuple(tuple) => match node {
                Node::Group(children) | Node::Items(children)
                    if children.len() == tuple.types().len() =>
                {
                    let mut values = Vec::with_capacity(children.len());
                    for (i, (child, ty)) in children.iter().zip(tuple.types()).enumerate() {
                        self.path.push(Step::Index(i));
                        values.push(self.read(*child, index, &ty, deeper)?);
                        self.path.pop();
                    }
                    Val::Tuple(values)
                }
                other => {
                    return Err(
                        self.wrong(&format!("a tuple of {} items", tuple.types().len()), other)
                    );
                }
            },
            Type::Record(record) => {
                let (fields, strict) = match node {
                    Node::Mapping(fields) => (fields, true),
                    Node::Attributes(fields) => (fields, false),
                    other => return Err(self.wrong("a dict (WIT record)", other)),
                };
                let declared: Vec<_> = record
                    .fields()
                    .map(|f| (f.name.to_string(), f.ty))
                    .collect();
                if strict {
                    for (given, _) in fields {
                        if !declared.iter().any(|(name, _)| *name == wit_name(given)) {
                            let known: Vec<String> =
                                declared.iter().map(|(n, _)| python_name(n)).collect();
                            return Err(ConvertError::WrongType(format!(
                                "{}: unknown field {given:?} (the record has: {})",
                                self.place(),
                                known.join(", ")
                            )));
                        }
                    }
                }
                let mut values = Vec::with_capacity(declared.len());
                for (name, ty) in &declared {
                    let Some((_, child)) =
                        fields.iter().find(|(given, _)| wit_name(given) == *name)
                    else {
                        return Err(ConvertError::WrongType(format!(
                            "{}: missing field {:?}",
                            self.place(),
                            python_name(name)
                        )));
                    };
                    self.path.push(Step::Field(name.clone()));
                    values.push((name.clone(), self.read(*child, index, ty, deeper)?));
                    self.path.pop();
                }
                // Attributes that are not fields were never visited: mark them so a later
                // check cannot mistake them for unused input.
                Val::Record(values)
            }
            Type::Variant(variant) => {
                let (case, payload) = match node {
                    Node::Tagged((case, payload)) => (case.as_str(), *payload),
                    Node::Text(case) => (case.as_str(), None),
                    other => return Err(self.wrong("a Variant(case, value) (WIT variant)", other)),
                };
                let cases: Vec<_> = variant
                    .cases()
                    .map(|c| (c.name.to_string(), c.ty))
                    .collect();
                let Some((name, ty)) = cases.iter().find(|(n, _)| *n == wit_name(case)) else {
                    let known: Vec<String> = cases.iter().map(|(n, _)| python_name(n)).collect();
                    return Err(ConvertError::WrongType(format!(
                        "{}: {case:?} is not a case of the variant (its cases: {})",
                        self.place(),
                        known.join(", ")
                    )));
                };
                self.path.push(Step::Case(name.clone()));
                let value = match (ty, payload) {
                    (None, None) => None,
                    (Some(ty), Some(child)) => {
                        self.path.push(Step::Payload);
                        let value = self.read(child, index, ty, deeper)?;
                        self.path.pop();
                        Some(Box::new(value))
                    }
                    (None, Some(_)) => {
                        return Err(ConvertError::WrongType(format!(
                            "{}: this case carries no value",
                            self.place()
                        )));
                    }
                    (Some(_), None) => {
                        return Err(ConvertError::WrongType(format!(
                            "{}: this case needs a value: Variant({:?}, value)",
                            self.place(),
                            python_name(name)
                        )));
                    }
                };
                self.path.pop();
                Val::Variant(name.clone(), value)
            }
            Type::Enum(cases) => match node {
                Node::Text(case) => {
                    let names: Vec<&str> = cases.names().collect();
                    let Some(name) = names.iter().find(|n| **n == wit_name(case)) else {
                        let known: Vec<String> = names.iter().map(|n| python_name(n)).collect();
                        return Err(ConvertError::WrongType(format!(
                            "{}: {case:?} is not one of {}",
                            self.place(),
                            known.join(", ")
                        )));
                    };
                    Val::Enum(name.to_string())
                }
                other => return Err(self.wrong("a str naming a case (WIT enum)", other)),
            },
            Type::Option(option) => match node {
                Node::None => Val::Option(None),
                _ => {
                    // Not consumed: read it again as the inner type.
                    self.used[index as usize] = false;
                    let inner = self.read(index, parent.unwrap_or(0), &option.ty(), depth)?;
                    Val::Option(Some(Box::new(inner)))
                }
            },
            Type::Result(result) => {
                let (ok, payload) = match node {
                    Node::Ok(payload) => (true, *payload),
                    Node::Err(payload) => (false, *payload),
                    other => return Err(self.wrong("Ok(value) or Err(value) (WIT result)", other)),
                };
                let ty = if ok { result.ok() } else { result.err() };
                let value = match (ty, payload) {
                    (None, None) => None,
                    (Some(ty), Some(child)) => {
                        Some(Box::new(self.read(child, index, &ty, deeper)?))
                    }
                    (None, Some(_)) => {
                        return Err(ConvertError::WrongType(format!(
                            "{}: this result case carries no value",
                            self.place()
                        )));
                    }
                    (Some(_), None) => {
                        return Err(ConvertError::WrongType(format!(
                            "{}: this result case needs a value",
                            self.place()
                        )));
                    }
                };
                Val::Result(if ok { Ok(value) } else { Err(value) })
            }
            Type::Flags(flags) => {
                let children = match node {
                    Node::Members(c) | Node::Items(c) | Node::Group(c) => c,
                    other => return Err(self.wrong("a set of str (WIT flags)", other)),
                };
                let names: Vec<&str> = flags.names().collect();
                let mut set = Vec::new();
                for child in children {
                    let given = match self.take(*child, Some(index)) {
                        Ok(Node::Text(s)) => s,
                        Ok(other) => return Err(self.wrong("a set of str (WIT flags)", other)),
                        Err(e) => {
                            return Err(ConvertError::WrongType(format!("{}: {e}", self.place())));
                        }
                    };
                    let Some(name) = names.iter().find(|n| **n == wit_name(given)) else {
                        let known: Vec<String> = names.iter().map(|n| python_name(n)).collect();
                        return Err(ConvertError::WrongType(format!(
                            "{}: {given:?} is not a flag (the flags: {})",
                            self.place(),
                            known.join(", ")
                        )));
                    };
                    if !set.iter().any(|s: &String| s == name) {
                        set.push(name.to_string());
                    }
                }
                Val::Flags(set)
            }
            other => {
                return Err(ConvertError::WrongType(format!(
                    "{}: {} values cannot be passed to a plugin yet",
                    self.place(),
                    type_name(other)
                )));
            }
        })
    }

    fn elements(
        &mut self,
        children: &[u32],
        parent: u32,
        ty: &Type,
        depth: usize,
    ) -> Result<Vec<Val>, ConvertError> {
        let mut values = Vec::with_capacity(children.len());
        for (i, child) in children.iter().enumerate() {
            self.path.push(Step::Index(i));
            values.push(self.read(*child, parent, ty, depth)?);
            self.path.pop();
        }
        Ok(values)
    }

    fn int<T: TryFrom<i128>>(&self, node: &Node, name: &str) -> Result<T, ConvertError> {
        let value: i128 = match node {
            Node::Signed(v) => i128::from(*v),
            Node::Unsigned(v) => i128::from(*v),
            Node::Big(text) => {
                return Err(ConvertError::OutOfRange(format!(
                    "{}: {text} is out of range for {name}",
                    self.place()
                )));
            }
            other => return Err(self.wrong(&format!("an int (WIT {name})"), other)),
        };
        T::try_from(value).map_err(|_| {
            ConvertError::OutOfRange(format!(
                "{}: {value} is out of range for {name} ({})",
                self.place(),
                range(name)
            ))
        })
    }

    fn float(&self, node: &Node, name: &str) -> Result<f64, ConvertError> {
        match node {
            Node::Float(f) => Ok(*f),
            Node::Signed(v) => Ok(*v as f64),
            Node::Unsigned(v) => Ok(*v as f64),
            other => Err(self.wrong(&format!("a float (WIT {name})"), other)),
        }
    }
}

fn range(name: &str) -> &'static str {
    match name {
        "s8" => "-128 to 127",
        "u8" => "0 to 255",
        "s16" => "-32768 to 32767",
        "u16" => "0 to 65535",
        "s32" => "-2147483648 to 2147483647",
        "u32" => "0 to 4294967295",
        "s64" => "-9223372036854775808 to 9223372036854775807",
        _ => "0 to 18446744073709551615",
    }
}

/// What a node holds, as Python names it.
fn kind(node: &Node) -> &'static str {
    match node {
        Node::None => "None",
        Node::Boolean(_) => "bool",
        Node::Signed(_) | Node::Unsigned(_) | Node::Big(_) => "int",
        Node::Float(_) => "float",
        Node::Text(_) => "str",
        Node::Bytes(_) => "bytes",
        Node::Items(_) => "list",
        Node::Group(_) => "tuple",
        Node::Mapping(_) => "dict",
        Node::Attributes(_) => "an object",
        Node::Members(_) => "set",
        Node::Tagged(_) => "Variant",
        Node::Ok(_) => "Ok",
        Node::Err(_) => "Err",
    }
}

/// A WIT type as messages name it.
pub fn type_name(ty: &Type) -> String {
    match ty {
        Type::Bool => "bool".into(),
        Type::S8 => "s8".into(),
        Type::U8 => "u8".into(),
        Type::S16 => "s16".into(),
        Type::U16 => "u16".into(),
        Type::S32 => "s32".into(),
        Type::U32 => "u32".into(),
        Type::S64 => "s64".into(),
        Type::U64 => "u64".into(),
        Type::Float32 => "f32".into(),
        Type::Float64 => "f64".into(),
        Type::Char => "char".into(),
        Type::String => "string".into(),
        Type::List(l) => format!("list<{}>", type_name(&l.ty())),
        Type::FixedLengthList(l) => format!("list<{}, {}>", type_name(&l.ty()), l.len()),
        Type::Map(m) => format!("map<{}, {}>", type_name(&m.key()), type_name(&m.value())),
        Type::Record(r) => format!(
            "record {{ {} }}",
            r.fields()
                .map(|f| format!("{}: {}", f.name, type_name(&f.ty)))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        Type::Tuple(t) => format!(
            "tuple<{}>",
            t.types()
                .map(|t| type_name(&t))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        Type::Variant(v) => format!(
            "variant {{ {} }}",
            v.cases()
                .map(|c| match c.ty {
                    Some(ty) => format!("{}({})", c.name, type_name(&ty)),
                    None => c.name.to_string(),
                })
                .collect::<Vec<_>>()
                .join(", ")
        ),
        Type::Enum(e) => format!("enum {{ {} }}", e.names().collect::<Vec<_>>().join(", ")),
        Type::Option(o) => format!("option<{}>", type_name(&o.ty())),
        Type::Result(r) => format!(
            "result<{}, {}>",
            r.ok().map_or("_".into(), |t| type_name(&t)),
            r.err().map_or("_".into(), |t| type_name(&t))
        ),
        Type::Flags(f) => format!("flags {{ {} }}", f.names().collect::<Vec<_>>().join(", ")),
        Type::Own(_) => "own<resource>".into(),
        Type::Borrow(_) => "borrow<resource>".into(),
        Type::Future(_) => "future".into(),
        Type::Stream(_) => "stream".into(),
        Type::ErrorContext => "error-context".into(),
    }
}

/// Write `value` (of type `ty`) as guest nodes; returns the node list, root first.
pub fn write(value: &Val, ty: &Type) -> Vec<Node> {
    let mut out = Vec::new();
    push(value, Some(ty), &mut out);
    out
}

fn push(value: &Val, ty: Option<&Type>, out: &mut Vec<Node>) -> u32 {
    let index = out.len() as u32;
    out.push(Node::None);
    let node = match value {
        Val::Bool(b) => Node::Boolean(*b),
        Val::S8(v) => Node::Signed(i64::from(*v)),
        Val::U8(v) => Node::Signed(i64::from(*v)),
        Val::S16(v) => Node::Signed(i64::from(*v)),
        Val::U16(v) => Node::Signed(i64::from(*v)),
        Val::S32(v) => Node::Signed(i64::from(*v)),
        Val::U32(v) => Node::Signed(i64::from(*v)),
        Val::S64(v) => Node::Signed(*v),
        Val::U64(v) => match i64::try_from(*v) {
            Ok(v) => Node::Signed(v),
            Err(_) => Node::Unsigned(*v),
        },
        Val::Float32(f) => Node::Float(f64::from(*f)),
        Val::Float64(f) => Node::Float(*f),
        Val::Char(c) => Node::Text(c.to_string()),
        Val::String(s) => Node::Text(s.clone()),
        Val::List(items) | Val::FixedLengthList(items) => {
            let element = match ty {
                Some(Type::List(l)) => Some(l.ty()),
                Some(Type::FixedLengthList(l)) => Some(l.ty()),
                _ => None,
            };
            if matches!(element, Some(Type::U8)) && matches!(value, Val::List(_)) {
                Node::Bytes(
                    items
                        .iter()
                        .map(|v| if let Val::U8(b) = v { *b } else { 0 })
                        .collect(),
                )
            } else {
                Node::Items(
                    items
                        .iter()
                        .map(|v| push(v, element.as_ref(), out))
                        .collect(),
                )
            }
        }
        Val::Map(entries) => {
            let (key, val) = match ty {
                Some(Type::Map(m)) => (Some(m.key()), Some(m.value())),
                _ => (None, None),
            };
            let pairs = entries
                .iter()
                .map(|(k, v)| {
                    let pair = out.len() as u32;
                    out.push(Node::None);
                    let k = push(k, key.as_ref(), out);
                    let v = push(v, val.as_ref(), out);
                    out[pair as usize] = Node::Group(vec![k, v]);
                    pair
                })
                .collect();
            Node::Items(pairs)
        }
        Val::Record(fields) => {
            let types: Vec<(String, Type)> = match ty {
                Some(Type::Record(r)) => r.fields().map(|f| (f.name.to_string(), f.ty)).collect(),
                _ => Vec::new(),
            };
            Node::Mapping(
                fields
                    .iter()
                    .map(|(name, v)| {
                        let field_ty = types.iter().find(|(n, _)| n == name).map(|(_, t)| t);
                        (python_name(name), push(v, field_ty, out))
                    })
                    .collect(),
            )
        }
        Val::Tuple(items) => {
            let types: Vec<Type> = match ty {
                Some(Type::Tuple(t)) => t.types().collect(),
                _ => Vec::new(),
            };
            Node::Group(
                items
                    .iter()
                    .enumerate()
                    .map(|(i, v)| push(v, types.get(i), out))
                    .collect(),
            )
        }
        Val::Variant(case, payload) => {
            let payload_ty = match ty {
                Some(Type::Variant(v)) => v.cases().find(|c| c.name == case).and_then(|c| c.ty),
                _ => None,
            };
            let child = payload.as_ref().map(|v| push(v, payload_ty.as_ref(), out));
            Node::Tagged((python_name(case), child))
        }
        Val::Enum(case) => Node::Text(python_name(case)),
        Val::Option(None) => Node::None,
        Val::Option(Some(inner)) => {
            let inner_ty = match ty {
                Some(Type::Option(o)) => Some(o.ty()),
                _ => None,
            };
            // The option's node is the value itself: drop the placeholder and write it here.
            out.pop();
            return push(inner, inner_ty.as_ref(), out);
        }
        Val::Result(result) => {
            let (ok_ty, err_ty) = match ty {
                Some(Type::Result(r)) => (r.ok(), r.err()),
                _ => (None, None),
            };
            match result {
                Ok(v) => Node::Ok(v.as_ref().map(|v| push(v, ok_ty.as_ref(), out))),
                Err(v) => Node::Err(v.as_ref().map(|v| push(v, err_ty.as_ref(), out))),
            }
        }
        Val::Flags(names) => Node::Members(
            names
                .iter()
                .map(|n| {
                    let i = out.len() as u32;
                    out.push(Node::Text(python_name(n)));
                    i
                })
                .collect(),
        ),
        // Refused when the plugin is loaded; never produced by a checked function.
        Val::Resource(_) | Val::Future(_) | Val::Stream(_) | Val::ErrorContext(_) => Node::None,
    };
    out[index as usize] = node;
    index
}
