// RedPanda DHLS component library: control operators (../shared/papers/08-redpanda.md).
// steer (branch), merge (decider-driven mux), carry (loop-carried value) and invariant
// (loop-invariant value re-emitted per iteration): the operators that turn structured
// control flow into dataflow. Firing rules match schedlab.redpanda.control exactly.

// steer: consumes (decider, value); forwards value iff decider == POL, else drops it.
module rp_steer #(parameter W = 32, parameter POL = 1) (
    input dec_data, input dec_valid, output dec_ready,
    input [W-1:0] val_data, input val_valid, output val_ready,
    output [W-1:0] out_data, output out_valid, input out_ready);
  wire both = dec_valid && val_valid;
  wire keep = (dec_data == POL);
  assign out_valid = both && keep;
  assign out_data = val_data;
  assign dec_ready = both && (keep ? out_ready : 1'b1);
  assign val_ready = dec_ready;
endmodule

// merge: consumes the decider and only the side it selects (true side when decider = 1).
module rp_merge #(parameter W = 32) (
    input dec_data, input dec_valid, output dec_ready,
    input [W-1:0] t_data, input t_valid, output t_ready,
    input [W-1:0] f_data, input f_valid, output f_ready,
    output [W-1:0] out_data, output out_valid, input out_ready);
  wire side_valid = dec_data ? t_valid : f_valid;
  assign out_valid = dec_valid && side_valid;
  assign out_data = dec_data ? t_data : f_data;
  wire fire = out_valid && out_ready;
  assign dec_ready = fire;
  assign t_ready = fire && dec_data;
  assign f_ready = fire && !dec_data;
endmodule

// carry: INIT forwards the initial value; BLOCK waits for the decider: true forwards 'next'
// (consuming decider and next together), false consumes the decider and returns to INIT.
module rp_carry #(parameter W = 32) (
    input clk, input rst,
    input [W-1:0] init_data, input init_valid, output init_ready,
    input dec_data, input dec_valid, output dec_ready,
    input [W-1:0] next_data, input next_valid, output next_ready,
    output [W-1:0] out_data, output out_valid, input out_ready);
  reg blocked;
  wire cont = dec_valid && dec_data;
  assign out_valid = blocked ? (cont && next_valid) : init_valid;
  assign out_data = blocked ? next_data : init_data;
  assign init_ready = !blocked && out_ready;
  assign next_ready = blocked && cont && out_ready;
  assign dec_ready = blocked && dec_valid && (dec_data ? (next_valid && out_ready) : 1'b1);
  always @(posedge clk) begin
    if (rst) blocked <= 0;
    else if (!blocked && init_valid && out_ready) blocked <= 1;
    else if (blocked && dec_valid && !dec_data) blocked <= 0;
  end
endmodule

// invariant: latches a value once, then emits it for every true decider; a false decider
// frees it for the next value. ALL=1 (loop-condition copy) also emits on latching.
module rp_invariant #(parameter W = 32, parameter ALL = 0) (
    input clk, input rst,
    input dec_data, input dec_valid, output dec_ready,
    input [W-1:0] val_data, input val_valid, output val_ready,
    output [W-1:0] out_data, output out_valid, input out_ready);
  reg blocked;
  reg [W-1:0] held;
  assign out_valid = blocked ? (dec_valid && dec_data) : (ALL ? val_valid : 1'b0);
  assign out_data = blocked ? held : val_data;
  assign val_ready = !blocked && (ALL ? out_ready : 1'b1);
  assign dec_ready = blocked && dec_valid && (dec_data ? out_ready : 1'b1);
  always @(posedge clk) begin
    if (rst) begin blocked <= 0; held <= 0; end
    else if (!blocked && val_valid && val_ready) begin blocked <= 1; held <= val_data; end
    else if (blocked && dec_valid && !dec_data) blocked <= 0;
  end
endmodule
