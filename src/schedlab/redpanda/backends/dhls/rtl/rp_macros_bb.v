// Black-box view of the arithmetic macros for Yosys resource estimation.
(* blackbox *)
module rp_mul #(parameter W = 32) (input [W-1:0] a, input [W-1:0] b, output [W-1:0] y);
endmodule

(* blackbox *)
module rp_divmod #(parameter W = 32, parameter REM = 0) (
    input [W-1:0] a, input [W-1:0] b, output [W-1:0] y);
endmodule
