// The syntax tree of a parsed template: expressions and statements of the Jinja subset chat templates use.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "template/value.hpp"

namespace photon::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind {
    kLiteral,    // value
    kName,       // name
    kList,       // items
    kDict,       // keys (as items[2i]) and values (items[2i+1])
    kAttr,       // items[0] . name
    kIndex,      // items[0] [ items[1] ]
    kSlice,      // items[0] [ items[1] : items[2] : items[3] ] (null parts allowed)
    kCall,       // items[0] ( items[1..] , kwargs )
    kFilter,     // items[0] | name ( items[1..], kwargs )
    kTest,       // items[0] is [not] name ( items[1..] )
    kUnary,      // op items[0]: "not", "-", "+"
    kBinary,     // items[0] op items[1]
    kCondition,  // items[0] if items[1] else items[2] (items[2] may be null)
  };
  Kind kind;
  int line = 0, column = 0;
  Value value;
  std::string name;  // name, attribute, filter, test or operator
  bool negated = false;
  std::vector<ExprPtr> items;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
};

struct Node;
using NodePtr = std::unique_ptr<Node>;
using Body = std::vector<NodePtr>;

struct Node {
  enum class Kind { kText, kOutput, kIf, kFor, kSet, kSetBlock, kBreak, kContinue, kMacro };
  Kind kind;
  int line = 0, column = 0;
  std::string text;                                // kText
  ExprPtr expr;                                    // kOutput, kSet value, kFor iterable, kFor filter in `cond`
  std::vector<std::pair<ExprPtr, Body>> branches;  // kIf: (condition or null for else, body)
  std::vector<std::string> targets;  // kFor loop variables; kSet: name, or namespace + attribute; kMacro params
  ExprPtr cond;                      // kFor inline `if`
  Body body;                         // kFor, kSetBlock, kMacro
  Body else_body;                    // kFor `else`
  std::vector<ExprPtr> defaults;     // kMacro parameter defaults (null where none)
};

}  // namespace photon::jinja
