// The parsed template: expression trees and statement nodes. A Program owns every node;
// rendering walks it without changing it, so one parsed template serves many renders.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "template/value.h"

namespace cadre::tmpl {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum Kind { Literal, Name, ListLit, TupleLit, DictLit, Attr, Item, Slice, Call, Filter, Test, Unary, Binary, Compare, Cond };
  Kind kind;
  int line;
  Value value;                 // Literal
  std::string name;            // Name, Attr's attribute, Filter/Test name, Unary/Binary operator
  std::vector<ExprPtr> args;   // children; layout per kind, see parser.cpp
  std::vector<std::pair<std::string, ExprPtr>> kwargs;  // Call/Filter/Test keyword arguments
  std::vector<std::string> ops;  // Compare: one operator between each pair of args
  bool negated = false;          // Test: `is not`
};

struct Node;
using Body = std::vector<std::unique_ptr<Node>>;

struct Node {
  enum Kind { Text, Output, If, For, Set, SetBlock, Macro, Break, Continue, Scope };
  Kind kind;
  int line;
  std::string text;                  // Text: the data; Macro: its name
  ExprPtr expr;                      // Output/Set value, For iterable
  std::vector<std::string> targets;  // For/Set names (several: tuple unpacking); Macro params
  std::string attr;                  // Set `ns.attr = ...`: the attribute (targets[0] is ns)
  ExprPtr filter;                    // For `... if cond`
  std::vector<std::pair<ExprPtr, Body>> branches;  // If/elif (condition, body); else has no condition
  std::vector<ExprPtr> defaults;     // Macro: default per parameter (null when none)
  Body body, else_body;              // For (else: no iterations), SetBlock, Macro, Scope
};

struct Program {
  Body body;
};

}  // namespace cadre::tmpl
