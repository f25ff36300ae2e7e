// RedPanda DHLS component library: handshake primitives (../shared/papers/08-redpanda.md).
// Every channel is (data, valid, ready); a token moves when valid && ready in one cycle.
// Written for schedlab; plain Verilog-2005 so Icarus Verilog and Yosys both accept it.

// Elastic buffer: a DEPTH-slot FIFO whose valid, data AND ready come from registers, so it
// cuts every combinational path (data, valid and the backward ready) through a channel.
// Latency 1, throughput 1 token per cycle for DEPTH >= 2.
module rp_eb #(parameter W = 32, parameter DEPTH = 2) (
    input clk, input rst,
    input [W-1:0] in_data, input in_valid, output in_ready,
    output [W-1:0] out_data, output out_valid, input out_ready);
  localparam CW = $clog2(DEPTH + 1);
  localparam PW = (DEPTH > 1) ? $clog2(DEPTH) : 1;
  reg [W-1:0] slots [0:DEPTH-1];
  reg [CW-1:0] count;
  reg [PW-1:0] head, tail;
  wire push = in_valid && in_ready;
  wire pop = out_valid && out_ready;
  assign in_ready = count < DEPTH;
  assign out_valid = count != 0;
  assign out_data = slots[head];
  always @(posedge clk) begin
    if (rst) begin
      count <= 0; head <= 0; tail <= 0;
    end else begin
      if (push) begin
        slots[tail] <= in_data;
        tail <= (tail == DEPTH - 1) ? 0 : tail + 1;
      end
      if (pop) head <= (head == DEPTH - 1) ? 0 : head + 1;
      count <= count + push - pop;
    end
  end
endmodule

// N-input join: one output token when every input has one; all are consumed together.
module rp_join #(parameter N = 2) (
    input [N-1:0] in_valid, output [N-1:0] in_ready,
    output out_valid, input out_ready);
  assign out_valid = &in_valid;
  assign in_ready = {N{out_valid && out_ready}};
endmodule

// Eager fork: each of N outputs takes the token as soon as it is ready; the input is consumed
// once all have taken it (the 'done' register remembers who already has).
module rp_fork #(parameter N = 2, parameter W = 32) (
    input clk, input rst,
    input [W-1:0] in_data, input in_valid, output in_ready,
    output [N*W-1:0] out_data, output [N-1:0] out_valid, input [N-1:0] out_ready);
  reg [N-1:0] done;
  assign out_valid = {N{in_valid}} & ~done;
  assign out_data = {N{in_data}};
  assign in_ready = &(done | out_ready);
  always @(posedge clk) begin
    if (rst) done <= 0;
    else if (in_valid) done <= in_ready ? {N{1'b0}} : (done | (out_valid & out_ready));
  end
endmodule

// Emits one token after reset (the kernel's start token, or a scalar argument's value).
module rp_source #(parameter W = 1) (
    input clk, input rst, input [W-1:0] value,
    output [W-1:0] out_data, output out_valid, input out_ready);
  reg sent;
  assign out_valid = !sent;
  assign out_data = value;
  always @(posedge clk) begin
    if (rst) sent <= 0;
    else if (out_ready) sent <= 1;
  end
endmodule

// A kernel result: always ready, keeps the last value and raises 'got'.
module rp_output #(parameter W = 32) (
    input clk, input rst,
    input [W-1:0] in_data, input in_valid, output in_ready,
    output reg [W-1:0] value, output reg got);
  assign in_ready = 1'b1;
  always @(posedge clk) begin
    if (rst) begin got <= 0; value <= 0; end
    else if (in_valid) begin got <= 1; value <= in_data; end
  end
endmodule

// Transparent FIFO: DEPTH slots that add capacity but no latency. An arriving token passes
// straight through when the FIFO is empty and the consumer is ready; otherwise it waits in a
// slot. Ready comes from a register. Used for slack matching on reconvergent paths.
module rp_tfifo #(parameter W = 32, parameter DEPTH = 1) (
    input clk, input rst,
    input [W-1:0] in_data, input in_valid, output in_ready,
    output [W-1:0] out_data, output out_valid, input out_ready);
  localparam CW = $clog2(DEPTH + 1);
  localparam PW = (DEPTH > 1) ? $clog2(DEPTH) : 1;
  reg [W-1:0] slots [0:DEPTH-1];
  reg [CW-1:0] count;
  reg [PW-1:0] head, tail;
  wire empty = (count == 0);
  assign in_ready = count < DEPTH;
  assign out_valid = !empty || in_valid;
  assign out_data = empty ? in_data : slots[head];
  wire push = in_valid && in_ready && !(empty && out_ready);
  wire pop = !empty && out_ready;
  always @(posedge clk) begin
    if (rst) begin
      count <= 0; head <= 0; tail <= 0;
    end else begin
      if (push) begin
        slots[tail] <= in_data;
        tail <= (tail == DEPTH - 1) ? 0 : tail + 1;
      end
      if (pop) head <= (head == DEPTH - 1) ? 0 : head + 1;
      count <= count + push - pop;
    end
  end
endmodule
