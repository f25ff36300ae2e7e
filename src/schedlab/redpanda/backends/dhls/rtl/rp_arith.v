// RedPanda DHLS component library: the arithmetic macros (../shared/papers/08-redpanda.md).
// Simulated and synthesised as written: Yosys maps the multiplier to DSP48E1 blocks and builds
// the divider from LUTs and carry chains (a combinational array; the unit around it registers
// its result LAT cycles later, and the clock model does not see that depth: documented).

module rp_mul #(parameter W = 32) (input [W-1:0] a, input [W-1:0] b, output [W-1:0] y);
  assign y = a * b;
endmodule

// Signed division / remainder truncating toward zero; division by zero yields 0 (see
// schedlab.redpanda.semantics: predicated divisions may run on untaken paths).
module rp_divmod #(parameter W = 32, parameter REM = 0) (
    input [W-1:0] a, input [W-1:0] b, output [W-1:0] y);
  wire signed [W-1:0] sa = a;
  wire signed [W-1:0] sb = b;
  wire signed [W-1:0] q = sa / sb;
  wire signed [W-1:0] r = sa % sb;
  assign y = (b == 0) ? {W{1'b0}} : (REM ? r : q);
endmodule
