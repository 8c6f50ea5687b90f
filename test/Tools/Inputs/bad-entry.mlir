// An entry point with the wrong signature: kiln-verify fails on it
// (test/Tools/pass-diagnostic.test).
func.func @prefill(%t: tensor<?xf32>, %pos: index) {
  %c = arith.constant 1 : index
  return
}
